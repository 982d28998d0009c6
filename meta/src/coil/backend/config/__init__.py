"""Settings: the per-compile `options`/`mode` of torch.compile, over the knobs coil.backend owns in
coil's registry (`coil.knobs`)."""
