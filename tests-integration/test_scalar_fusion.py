"""Single-element updates gathered into one kernel (coil.scheduler.fusion: `scalars`, at most
SCALAR_MAX_OPS operations) compute what eager computes.

A training step of convolutions with batch norm: every batch norm counts its steps
(`num_batches_tracked += 1`), a one-element update of its own. Gathered, the forward launches
one kernel for all the counters (with the gathering bounded to nothing, SCALAR_MAX_OPS = 1, one
kernel each); the loss, the gradients, the running statistics and the counters equal eager's.
"""

from __future__ import annotations

import copy

import pytest
import torch
from check import compiled_anew
from coil.scheduler import fusion
from torch import nn

LAYERS = 4


def _model() -> nn.Module:
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for i in range(LAYERS):
        layers += [nn.Conv2d(3 if i == 0 else 8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU()]
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4))


def _step(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    loss = model(x).square().mean()
    loss.backward()
    return loss


def _compiled(model: nn.Module, x: torch.Tensor) -> tuple[int, torch.Tensor]:
    """The forward graph's kernels and the loss of one compiled training step."""
    graphs, loss = compiled_anew(model, lambda m: _step(m, x))
    forward = [g for g in graphs if g.name.startswith("forward")]
    assert len(forward) == 1, [g.name for g in graphs]
    return forward[0].kernels, loss


def test_batch_norms_step_counters_share_one_kernel(device: torch.device, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fusion, "COMBO_MAX_PARTS", 1)  # the counters read only inputs: no combo takes them
    x = torch.randn(2, 3, 8, 8, device=device)
    eager = _model().to(device)
    compiled = copy.deepcopy(eager)
    want = _step(eager, x)
    kernels, got = _compiled(compiled, x)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    for (name, p), q in zip(compiled.named_parameters(), eager.parameters(), strict=True):
        assert p.grad is not None and q.grad is not None, name
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=name)
    for (name, b), c in zip(compiled.named_buffers(), eager.buffers(), strict=True):
        torch.testing.assert_close(b, c, rtol=1e-4, atol=1e-5, msg=name)  # running stats, counters
    monkeypatch.setattr(fusion, "SCALAR_MAX_OPS", 1)
    apart, _ = _compiled(copy.deepcopy(eager), x)
    assert apart - kernels == LAYERS - 1, (kernels, apart)
