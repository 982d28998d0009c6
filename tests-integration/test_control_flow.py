"""torch.cond in compiled code: a data-dependent branch stays one higher-order op through Dynamo
and AOTAutograd, taking its branches as graph modules. coil calls it from the compiled wrapper
(the branches are constants of the wrapper, run by torch), so the rest of the graph stays
compiled, forward and backward; the oracle is the uncompiled module."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn
from coil.backend import COMPILED
from coil.knobs import knobs


class Branchy(nn.Module):
    """A linear map, then one of two pointwise branches chosen by the sign of a sum, then more."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(8, 8) / 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x @ self.w
        y = torch.cond(h.sum() > 0, lambda t: t.sin() * 2, lambda t: t.cos() - 1, (h,))
        return torch.relu(y) + h


@pytest.mark.parametrize("train", [False, True], ids=["inference", "training"])
def test_cond_runs_inside_compiled_code(device: torch.device, train: bool) -> None:
    torch.manual_seed(0)
    model = Branchy().to(device)
    twin = copy.deepcopy(model)
    with knobs.override(fallback_on_error=False), torch.set_grad_enabled(train):
        compiled = torch.compile(twin, backend="coil")
        for sign in (1.0, -1.0):  # both branches, one compiled graph
            x = torch.randn(4, 8, device=device).abs() * sign
            got, want = compiled(x), model(x)
            torch.testing.assert_close(got, want)
            if train:
                got.square().sum().backward()
                want.square().sum().backward()
                assert twin.w.grad is not None and model.w.grad is not None
                torch.testing.assert_close(twin.w.grad, model.w.grad)
                twin.zero_grad()
                model.zero_grad()
    kinds = sorted(s.name.split("_")[0] for s in COMPILED)
    assert kinds == (["backward", "forward"] if train else ["inference"]), kinds
    assert all(s.eager_fallback is None for s in COMPILED), [s.eager_fallback for s in COMPILED]
