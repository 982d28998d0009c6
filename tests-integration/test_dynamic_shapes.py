"""Dynamic shapes: one compiled graph serves several sizes (sizes become kernel arguments)."""

from __future__ import annotations

import pytest
import torch
from coil.backend import COMPILED
from coil.knobs import knobs
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


# indexing with a symbolic size: wrap-around of negative indices, range masks and offsets
# (cat, pad) carry the size symbols into the kernels instead of constants
_F = torch.nn.functional
INDEXING = {
    "gather": (lambda x, i: torch.gather(x, 1, i), lambda n, d: (torch.randn(4, n, device=d), torch.randint(0, n, (4, 3), device=d))),
    "index_negative": (lambda x, i: x[i - 2], lambda n, d: (torch.randn(n, 5, device=d), torch.randint(0, n, (3,), device=d))),
    "index_select": (lambda x, i: x.index_select(0, i), lambda n, d: (torch.randn(n, 5, device=d), torch.randint(0, n, (3,), device=d))),
    "embedding": (lambda w, i: _F.embedding(i, w), lambda n, d: (torch.randn(n, 4, device=d), torch.randint(0, n, (5,), device=d))),
    "cross_entropy": (lambda x, t: _F.cross_entropy(x, t), lambda n, d: (torch.randn(n, 10, device=d), torch.randint(0, 10, (n,), device=d))),
    "cat_symbolic_dim": (lambda x, y: torch.cat([x, y * 2], 0), lambda n, d: (torch.randn(n, 3, device=d), torch.randn(n + 1, 3, device=d))),
    "pad": (lambda x: _F.pad(x, (1, 2, 3, 0), value=1.5), lambda n, d: (torch.randn(2, n, n, device=d),)),
    "nearest_upsample": (lambda x: _F.interpolate(x, scale_factor=2, mode="nearest"), lambda n, d: (torch.randn(1, 2, n, n, device=d),)),
}


@pytest.mark.parametrize("case", sorted(INDEXING))
def test_indexing_with_symbolic_sizes(case: str, device: torch.device) -> None:
    if case == "nearest_upsample" and device.type == "cuda":
        # interpolate computes its scale as a 0-d CPU tensor from the size symbol; coil launches
        # every kernel of a graph on one device, so the CPU scalar's kernel fails the device
        # check and the graph runs eagerly (moving such 0-d CPU computations onto the graph's
        # device is not done yet).
        pytest.xfail("0-d CPU scalar computation inside a CUDA graph")
    fn, make = INDEXING[case]
    compiled = torch.compile(fn, backend="coil", dynamic=True)
    torch.manual_seed(0)
    with knobs.override(fallback_on_error=False):
        for n in (9, 12, 17):
            args = make(n, device)
            torch.testing.assert_close(compiled(*args), fn(*args))
    assert len(COMPILED) == 1, [s.name for s in COMPILED]
    assert COMPILED[0].eager_fallback is None and COMPILED[0].fallbacks == []


def test_cross_entropy_training_with_symbolic_batch_and_classes(device: torch.device) -> None:
    """The forward returns the size symbols the backward needs (SymInt graph outputs); loss and
    gradient match eager at three sizes with one forward and one backward graph."""
    compiled = torch.compile(_F.cross_entropy, backend="coil", dynamic=True)
    torch.manual_seed(0)
    with knobs.override(fallback_on_error=False):
        for n, c in ((6, 10), (9, 13), (17, 7)):
            x = torch.randn(n, c, device=device, requires_grad=True)
            t = torch.randint(0, c, (n,), device=device)
            loss = compiled(x, t)
            loss.backward()
            x_ref = x.detach().clone().requires_grad_(True)
            ref = _F.cross_entropy(x_ref, t)
            ref.backward()
            torch.testing.assert_close(loss, ref)
            torch.testing.assert_close(x.grad, x_ref.grad)
    assert sorted(s.name.split("_")[0] for s in COMPILED) == ["backward", "forward"]
    assert all(s.eager_fallback is None and s.fallbacks == [] for s in COMPILED)
