"""put (ops/put.py): one Scatter into flat row-major positions, equal to eager through the
brute-force IR evaluator of conftest.py: negative indices, index and source of different shapes,
accumulation with duplicate indices, integer and bool tensors, non-contiguous operands."""

from __future__ import annotations

import coil.lowering_ir as L
import pytest
import torch


def _fallbacks(g: L.LoweredGraph) -> list[object]:
    return [op.kernel for op in g.operations if isinstance(op, L.ExternKernel) and op.fallback]


def _check(ir, fn, *args):
    g = ir.lower(fn, *args)
    assert _fallbacks(g) == []
    assert any(isinstance(op, L.Scatter) for op in g.operations)
    got, want = ir.evaluate(g, list(args)), list(fn(*args))
    for a, b in zip(got, want, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


def test_put_negative_indices_and_other_shapes(ir):
    torch.manual_seed(0)
    x = torch.randn(3, 4)
    index = torch.tensor([[0, -1], [5, -8]]).t()  # -1: the last of the 12 elements, -8: element 4
    source = torch.randn(4, 2)[:, 0]  # a strided source of another shape than index
    _check(ir, lambda x, i, s: (torch.put(x, i, s),), x, index, source)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.int32])
def test_put_accumulate_adds_duplicates(ir, dtype):
    x = torch.arange(10).to(dtype).reshape(2, 5)
    index = torch.tensor([1, 1, -1, 3, 1, 9])
    source = torch.tensor([[1, 2, 3], [4, 5, 6]]).to(dtype)
    _check(ir, lambda x, i, s: (torch.put(x, i, s, accumulate=True),), x, index, source)


def test_put_bool_and_distinct_positions(ir):
    x = torch.zeros(3, 3, dtype=torch.bool)
    index = torch.tensor([8, 0, 4])
    source = torch.tensor([True, True, False])
    _check(ir, lambda x, i, s: (torch.put(x, i, s), torch.put(x, i, s, accumulate=True)), x, index, source)


def test_put_into_a_non_contiguous_layout_falls_back(ir):
    # the clone keeps x's transposed strides: a flat position is then no storage index
    x = torch.randn(4, 3).t()
    g = ir.lower(lambda x, i, s: (torch.put(x, i, s),), x, torch.tensor([1, 2]), torch.ones(2))
    assert _fallbacks(g) == [torch.ops.aten.put.default]


def test_put_half_accumulate_runs_in_float32(ir):
    """No half-precision atomics: the scatter accumulates into a float32 twin, then one cast."""
    x = torch.full((4,), 0.5, dtype=torch.float16)
    i, s = torch.tensor([1, 1, 3]), torch.tensor([1e-3, 1e-3, 2.0]).half()
    g = ir.lower(lambda x, i, s: (torch.put(x, i, s, accumulate=True),), x, i, s)
    assert _fallbacks(g) == []
    (got,) = ir.evaluate(g, [x, i, s])
    exact = torch.put(x.double(), i, s.double(), accumulate=True)
    assert got.dtype == torch.float16 and torch.equal(got, exact.half())
