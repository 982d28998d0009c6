"""End to end: each model compiled with backend="coil" equals eager (fp32, 1e-4), gradients too."""

from __future__ import annotations

import pytest
import torch
from check import run_both
from coil.backend import COMPILED
from models import MODELS


@pytest.mark.parametrize("name", sorted(MODELS))
def test_training_matches_eager(name: str, device: torch.device) -> None:
    cls, shape = MODELS[name]
    torch.manual_seed(0)
    model = cls().to(device)
    run_both(model, torch.randn(*shape, device=device), train=True)
    kinds = {s.name.split("_")[0] for s in COMPILED}
    assert {"forward", "backward"} <= kinds
    assert all(s.eager_fallback is None for s in COMPILED), [s.eager_fallback for s in COMPILED]


@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_inference_matches_eager(name: str, device: torch.device) -> None:
    cls, shape = MODELS[name]
    torch.manual_seed(0)
    model = cls().to(device).eval()
    run_both(model, torch.randn(*shape, device=device), train=False)
    assert [s.name.split("_")[0] for s in COMPILED] == ["inference"]


def test_fallback_op_runs_through_aten(device: torch.device) -> None:
    cls, shape = MODELS["fallback_sort"]
    torch.manual_seed(0)
    run_both(cls().to(device), torch.randn(*shape, device=device), train=True)
    fallbacks = [f for s in COMPILED for f in s.fallbacks]
    assert any("sort" in f for f in fallbacks), fallbacks
    # the tanh/mul after the fallback still ran as a Triton kernel
    assert any(any("tanh" in o for o in origins) for s in COMPILED for origins in s.kernel_origins)
