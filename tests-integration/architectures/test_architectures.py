"""Architectures beyond the zoo (catalog.py) compiled with backend="coil" on the CPU (Triton's
interpreter) in fp32, inference (`eval()`, under `no_grad`: the logits, or the last hidden state
of a bare encoder) and one training step (a loss of that output, then every parameter's gradient
and every buffer). Oracle: the same model in fp64, with the PyTorch benchmark harness's rule
(coil's RMSE at most 3 x fp32 eager's + 1e-5; check.within_harness_rule), which holds a model to
eager's own rounding error where that is large (LeViT's batch norms over two images); a model
that cannot run in fp64 (`Arch.fp64`) is held to eager fp32 instead (check.close_scaled). Dropout,
stochastic depth, router noise and SpecAugment masking are set to zero in the config, so that
every side computes the same function. Compile errors fall back to eager as users get them, and
the test fails if any coil graph ran eagerly. A parameter eager leaves without a gradient (it
feeds only an output the loss ignores, a pooler) may get zeros, as under every torch.compile
backend (AOTAutograd). An entry whose classes this transformers lacks is skipped, naming them.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import torch
from check import close_scaled, no_eager_graphs, within_harness_rule
from coil.bench.spec import cast_inputs
from coil.bench.steps import model_fp64
from coil.knobs import knobs

from .catalog import ARCHITECTURES, Arch

# config fields that make a training step random, besides every float field named *drop*
RANDOM_FIELDS = ("router_jitter_noise", "mask_time_prob", "mask_feature_prob")


def build(name: str) -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    """The entry's model (seeded, in train mode, nothing random in its step) and its inputs."""
    transformers = pytest.importorskip("transformers")
    arch = ARCHITECTURES[name]
    if not hasattr(transformers, arch.model) or not hasattr(transformers, arch.config):
        pytest.skip(f"transformers {transformers.__version__} has no {arch.model} or {arch.config}")
    config = getattr(transformers, arch.config)(**arch.kwargs)
    for key, value in config.to_dict().items():
        if isinstance(value, float) and ("drop" in key or key in RANDOM_FIELDS):
            setattr(config, key, 0.0)
    torch.manual_seed(0)
    model = getattr(transformers, arch.model)(config)
    return model, inputs(arch, config)


def inputs(arch: Arch, config: Any) -> dict[str, torch.Tensor]:
    """Seeded inputs of the entry's kind: 2 rows of 16 tokens (the second padded after 12 for
    encoders and encoder-decoders; 8 target tokens), 2 images at the config's size, 2 waveforms
    of 400 samples, or 2 log-mel spectrograms as long as the speech encoder takes."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 250, (2, 16), generator=g)
    mask = torch.ones(2, 16, dtype=torch.long)
    mask[1, 12:] = 0
    if arch.kind == "decoder":
        return {"input_ids": ids}
    if arch.kind == "encoder":
        return {"input_ids": ids, "attention_mask": mask}
    if arch.kind == "encdec":
        return {"input_ids": ids, "attention_mask": mask, "decoder_input_ids": ids[:, :8]}
    if arch.kind == "vision":
        size = config.image_size[0] if isinstance(config.image_size, list | tuple) else config.image_size
        return {"pixel_values": torch.randn(2, 3, size, size, generator=g)}
    if arch.kind == "audio":
        return {"input_values": torch.randn(2, 400, generator=g)}
    frames = 2 * config.max_source_positions  # the encoder's two convolutions halve the frames
    return {"input_features": torch.randn(2, config.num_mel_bins, frames, generator=g),
            "decoder_input_ids": ids[:, :8]}


def output(out: Any) -> torch.Tensor:
    """The logits, or the last hidden state of a model without a head."""
    logits = getattr(out, "logits", None)
    return logits if isinstance(logits, torch.Tensor) else out.last_hidden_state


def _run(model: torch.nn.Module, x: dict[str, torch.Tensor], compile_it: bool) -> torch.Tensor:
    fn: Callable[..., Any] = torch.compile(model, backend="coil") if compile_it else model
    return output(fn(**x))


def _check(got: torch.Tensor, eager: torch.Tensor, reference: torch.Tensor | None, what: str) -> None:
    """The harness's rule against the fp64 `reference`, or closeness to eager without one."""
    if reference is None:
        close_scaled(got, eager, what)
    else:
        within_harness_rule(got, eager, reference, what)


def _loss(out: torch.Tensor) -> torch.Tensor:
    return out.double().square().mean()


@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_inference_matches_fp64(name: str) -> None:
    model, x = build(name)
    model.eval()
    twin, m64 = copy.deepcopy(model), model_fp64(model)
    with torch.no_grad():
        reference = _run(m64, cast_inputs(x, torch.float64), False) if ARCHITECTURES[name].fp64 else None
        eager = _run(model, x, False)
        with knobs.override(fallback_on_error=True):
            got = _run(twin, x, True)
    no_eager_graphs()
    _check(got, eager, reference, "output")


@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_training_step_matches_fp64(name: str) -> None:
    model, x = build(name)
    twin, m64 = copy.deepcopy(model), model_fp64(model)
    reference = _loss(_run(m64, cast_inputs(x, torch.float64), False)) if ARCHITECTURES[name].fp64 else None
    if reference is not None:
        reference.backward()
    eager = _loss(_run(model, x, False))
    eager.backward()
    with knobs.override(fallback_on_error=True):
        got = _loss(_run(twin, x, True))
        got.backward()
    no_eager_graphs()
    _check(got, eager, reference, "loss")
    for (pname, p), q, r in zip(twin.named_parameters(), model.parameters(), m64.parameters(), strict=True):
        if q.grad is None:  # AOTAutograd gives zeros where an output the loss ignores leads
            assert p.grad is None or not p.grad.any(), f"gradient of {pname}: eager has none"
            continue
        assert p.grad is not None, f"gradient of {pname}: missing"
        _check(p.grad, q.grad, r.grad, f"gradient of {pname}")
    for (bname, b), c, d in zip(twin.named_buffers(), model.buffers(), m64.buffers(), strict=True):
        if b.is_floating_point():
            _check(b, c, d if reference is not None else None, f"buffer {bname}")
        else:
            assert torch.equal(b, c), f"buffer {bname}"
