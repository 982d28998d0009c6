"""cat's two lowerings: a Pointwise choosing among masked loads for a few parts, ATen's cat (an
extern, not a fallback) for more than CAT_MAX_POINTWISE_PARTS."""

from __future__ import annotations

import coil.lowering_ir as L
import pytest
import torch
from coil.lowering_ir.ops.indexing import CAT_MAX_POINTWISE_PARTS


@pytest.mark.parametrize("parts", [2, CAT_MAX_POINTWISE_PARTS, CAT_MAX_POINTWISE_PARTS + 1, 300])
def test_cat_of_many_parts_is_one_aten_cat(ir, parts):
    def fn(*xs):
        return (torch.cat([x * (i + 1) for i, x in enumerate(xs)], dim=1) + 1,)

    xs = [torch.randn(3, 1 + i % 3) for i in range(parts)]
    g = ir.lower(fn, *xs)
    cats = [op for op in g.operations if isinstance(op, L.ExternKernel) and op.kernel is torch.ops.aten.cat.default]
    if parts > CAT_MAX_POINTWISE_PARTS:
        assert len(cats) == 1 and not cats[0].fallback
    else:
        assert not any(isinstance(op, L.ExternKernel) for op in g.operations)
    ir.assert_same(ir.evaluate(g, xs), list(fn(*xs)))


def test_stack_of_an_unrolled_recurrence(ir):
    """The 600 steps of a recurrence stacked (transformers' sequential scans), every step a part:
    as nested choices they made a body too deep for lowering's recursive walks."""

    def fn(a, b):
        h = torch.zeros_like(b[:, 0])
        outs = []
        for i in range(a.shape[1]):
            h = a[:, i] * h + b[:, i]
            outs.append(h)
        return (torch.stack(outs, dim=1),)

    a, b = torch.rand(2, 600), torch.randn(2, 600)
    g = ir.lower(fn, a, b)
    ir.assert_same(ir.evaluate(g, [a, b]), list(fn(a, b)))
