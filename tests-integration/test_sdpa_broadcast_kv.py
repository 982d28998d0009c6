"""Multi-query attention written without `repeat_kv` (HF Falcon's older architecture: one key and
value head for every query head, broadcast by SDPA) under coil. CUDA's fused SDPA kernels take
only equal head counts, so fx-passes' `widen_broadcast_kv` widens the key and value first and
the wrapper calls a fused kernel instead of the math path's materialised scores; the CPU's flash
kernel broadcasts by itself and the call stays as written. Checked on the wrapper coil generates
and against eager, inference and a training step."""

from __future__ import annotations

import pytest
import torch
from check import zoo_training_step_matches_eager
from coil.backend import COMPILED
from coil.bench import zoo
from coil.knobs import knobs

pytest.importorskip("transformers")

_FUSED = {"cuda": ("_flash_attention", "_efficient_attention", "_cudnn_attention"),
          "cpu": ("_flash_attention_for_cpu",)}


def _sdpa_lines(first: int) -> list[str]:
    return [ln.strip() for s in COMPILED[first:] for ln in s.wrapper_source.splitlines() if "scaled_dot_product" in ln]


def test_falcon_inference_calls_a_fused_kernel(device: torch.device) -> None:
    model, inputs = zoo.build("falcon", "tiny", str(device), torch.float32)
    model.eval()
    first = len(COMPILED)
    with knobs.override(fallback_on_error=False), torch.no_grad():
        want = zoo.forward("falcon", model, inputs)
        got = zoo.forward("falcon", torch.compile(model, backend="coil"), inputs)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    lines = _sdpa_lines(first)
    assert lines and all(any(k in ln for k in _FUSED[device.type]) for ln in lines), lines


def test_falcon_training_step_matches_eager_through_a_fused_kernel(device: torch.device) -> None:
    lines = zoo_training_step_matches_eager("falcon", device)
    assert any("backward" in ln for ln in lines), lines
    assert all(any(k in ln for k in _FUSED[device.type]) for ln in lines), lines
