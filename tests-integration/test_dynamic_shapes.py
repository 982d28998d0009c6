"""Dynamic shapes: one compiled graph serves several sizes (sizes become kernel arguments)."""

from __future__ import annotations

import torch
from coil.backend import COMPILED, knobs
from models import MLP


def _norm_and_reduce(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.layer_norm(x, (x.shape[-1],)) * w + x.sum(0) + x.mean()


def test_dynamic_true_serves_three_sizes_without_recompiling(device: torch.device) -> None:
    compiled = torch.compile(_norm_and_reduce, backend="coil", dynamic=True)
    with knobs.override(fallback_on_error=False):
        for rows, cols in [(5, 8), (7, 8), (9, 16)]:
            x = torch.randn(rows, cols, device=device)
            w = torch.randn(cols, device=device)
            torch.testing.assert_close(compiled(x, w), _norm_and_reduce(x, w))
    assert len(COMPILED) == 1, [s.name for s in COMPILED]
    assert COMPILED[0].eager_fallback is None and COMPILED[0].fallbacks == []


def test_mark_dynamic_training(device: torch.device) -> None:
    torch.manual_seed(0)
    model = MLP().to(device)
    compiled = torch.compile(model, backend="coil")
    with knobs.override(fallback_on_error=False):
        for batch in (3, 6, 11):
            x = torch.randn(batch, 16, device=device, requires_grad=True)
            torch._dynamo.mark_dynamic(x, 0)
            out = compiled(x)
            out.square().sum().backward()
            x_ref = x.detach().clone().requires_grad_(True)
            ref = model(x_ref)
            ref.square().sum().backward()
            torch.testing.assert_close(out, ref)
            torch.testing.assert_close(x.grad, x_ref.grad)
    kinds = sorted(s.name.split("_")[0] for s in COMPILED)
    assert kinds == ["backward", "forward"], kinds
    assert all(s.eager_fallback is None for s in COMPILED)
