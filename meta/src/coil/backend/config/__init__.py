"""Settings: the knobs coil.backend reads and the per-compile `options`/`mode` of torch.compile."""
