"""Combo kernels (coil.scheduler.combo, triton-codegen's combo.py) in an autocast training step.

Under autocast every weight is cast to bfloat16 in the forward, each cast a small kernel over a
space of its own; the backward's weight gradients are products in bfloat16 cast back to float32
at its end. Gathered into combo kernels, the step launches fewer kernels (with combos bounded
to one part, COMBO_MAX_PARTS = 1, each cast is a kernel again), and its loss and gradients equal
those of the step without combos and of eager under the same autocast.
"""

from __future__ import annotations

import copy
import itertools

import pytest
import torch
from check import compiled_anew
from coil.scheduler import fusion
from torch import nn

WIDTHS = (24, 40, 56, 16, 8)


def _model() -> nn.Module:
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(itertools.pairwise(WIDTHS)):
        layers += [nn.Linear(a, b, bias=i % 2 == 0), nn.GELU()]
    return nn.Sequential(*layers)


def _step(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    with torch.autocast(x.device.type, dtype=torch.bfloat16):
        loss = model(x).float().square().mean()
    loss.backward()
    return loss


def _compiled(model: nn.Module, x: torch.Tensor) -> tuple[int, torch.Tensor]:
    """The kernels of the step's forward and backward graphs, and its loss."""
    graphs, loss = compiled_anew(model, lambda m: _step(m, x))
    assert sorted(g.name.split("_")[0] for g in graphs) == ["backward", "forward"], [g.name for g in graphs]
    return sum(g.kernels for g in graphs), loss


def _grads(model: nn.Module) -> list[torch.Tensor]:
    return [p.grad for p in model.parameters() if p.grad is not None]


def test_an_autocast_step_with_combos_equals_the_step_without(device: torch.device,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    x = torch.randn(12, WIDTHS[0], device=device)
    eager = _model().to(device)
    combos, parted = copy.deepcopy(eager), copy.deepcopy(eager)
    want = _step(eager, x)
    kernels, got = _compiled(combos, x)
    monkeypatch.setattr(fusion, "COMBO_MAX_PARTS", 1)
    apart, got_apart = _compiled(parted, x)
    # four weights and two biases cast in the forward, as many gradients cast back at the end
    assert apart - kernels >= 2 * (len(WIDTHS) - 2), (kernels, apart)
    torch.testing.assert_close(got, got_apart, rtol=0, atol=0)
    for a, b in zip(_grads(combos), _grads(parted), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)  # the same kernels' arithmetic, launched apart
    torch.testing.assert_close(got, want, rtol=2e-2, atol=1e-3)
    for a, b in zip(_grads(combos), _grads(eager), strict=True):
        torch.testing.assert_close(a, b, rtol=5e-2, atol=5e-3)
