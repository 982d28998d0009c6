"""HF decoders with their default attention (sdpa) under torch.compile: transformers cannot see
that no sequence is padded while tracing, so it builds the full causal mask from aranges and
passes it to SDPA (eager passes none and `is_causal=True`). fx-passes' `causal_masks` (coil's
pre-grad pipeline) computes that mask at compile time, finds it is the causal mask, and the
graphs run SDPA's causal kernel with no mask: checked on the wrapper coil generates (the causal
flag set, no mask argument), for inference and a training step, against eager."""

from __future__ import annotations

import pytest
import torch
from check import zoo_training_step_matches_eager
from coil.backend import COMPILED
from coil.bench import zoo
from coil.knobs import knobs

pytest.importorskip("transformers")


def _sdpa_lines(first: int) -> list[str]:
    return [ln.strip() for s in COMPILED[first:] for ln in s.wrapper_source.splitlines() if "scaled_dot_product" in ln]


@pytest.mark.parametrize("name", ["llama", "gpt2"])
def test_a_decoders_traced_mask_runs_causal_sdpa(device: torch.device, name: str) -> None:
    model, inputs = zoo.build(name, "tiny", str(device), torch.float32)
    model.eval()
    first = len(COMPILED)
    with knobs.override(fallback_on_error=False), torch.no_grad():
        want = zoo.forward(name, model, inputs)
        got = zoo.forward(name, torch.compile(model, backend="coil"), inputs)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    lines = _sdpa_lines(first)
    assert lines and all("True" in ln and "attn_mask" not in ln for ln in lines), lines


def test_a_training_step_through_the_causal_kernel_matches_eager(device: torch.device) -> None:
    lines = zoo_training_step_matches_eager("llama", device)
    assert any("backward" in ln for ln in lines) and all("attn_mask" not in ln for ln in lines), lines
