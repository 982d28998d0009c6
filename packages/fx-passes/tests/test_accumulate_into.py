"""accumulate_into_addend: add(a, index_put(zeros, idx, v, True)) accumulates into a."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from coil.fx_passes import (
    PassManager,
    Stage,
    accumulate_into_addend,
    dead_code_elimination,
    run_post_grad_passes,
)
from torch._decomp import core_aten_decompositions
from torch._functorch.aot_autograd import aot_module_simplified, make_boxed_func
from torch.fx import GraphModule

aten = torch.ops.aten
PUTS = (aten.index_put.default, aten._unsafe_index_put.default)


def run(gm: GraphModule) -> bool:
    return PassManager([accumulate_into_addend, dead_code_elimination], stage=Stage.POST_GRAD).run(gm).modified


def count(gm: GraphModule, *targets: Any) -> int:
    return sum(n.target in targets for n in gm.graph.nodes)


def test_tied_embedding_gradient_is_one_index_put() -> None:
    """A tied embedding (GPT-2's wte: the input lookup and the output projection share one weight)
    as AOTAutograd makes its backward with torch's core decompositions (coil's table starts from
    them): embedding_dense_backward becomes index_put(full(0), ...), and the weight's gradient is
    mm + that; after the pipeline, one index_put into the mm
    part. Oracle: eager autograd, with repeated ids (duplicates must add up)."""
    graphs: list[tuple[GraphModule, GraphModule]] = []

    def compiler(g: GraphModule, _: object) -> object:
        before = copy.deepcopy(g)
        after = run_post_grad_passes(g, is_backward=bool(graphs))
        graphs.append((before, after))
        return make_boxed_func(after.forward)

    def tied(ids: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor]:
        h = torch.tanh(F.embedding(ids, w))
        return ((h @ w.t()).logsumexp(-1).sum(),)

    torch.manual_seed(0)
    w = torch.randn(11, 6, dtype=torch.float64, requires_grad=True)
    ids = torch.tensor([[1, 3, 3, 10], [0, 3, 7, 1]])
    gm = torch.fx.symbolic_trace(tied)
    compiled = aot_module_simplified(gm, [ids, w], fw_compiler=compiler, bw_compiler=compiler,
                                     decompositions=core_aten_decompositions())
    (loss,) = compiled(ids, w)
    loss.backward()
    wr = w.detach().clone().requires_grad_()
    (want,) = tied(ids, wr)
    want.backward()
    torch.testing.assert_close(loss, want)
    torch.testing.assert_close(w.grad, wr.grad)
    before, after = graphs[1]
    assert count(before, *PUTS) == 1 and count(before, aten.add.Tensor) >= 1
    (put,) = [n for n in after.graph.nodes if n.target in PUTS]
    assert put.args[0].target is not aten.full.default  # accumulates into the mm's part
    assert [n.name for n in after.graph.nodes if n.target is aten.full.default] == []


def _rows(v: int = 9, d: int = 5, n: int = 12) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    ids = torch.randint(0, v, (n,))
    ids[:3] = 2  # duplicates: their rows add up
    return torch.randn(v, d, dtype=torch.float64), ids, torch.randn(n, d, dtype=torch.float64)


CASES: dict[str, tuple[Callable[..., torch.Tensor], Callable[[], tuple[torch.Tensor, ...]]]] = {
    "addend_first": (lambda a, i, r: a + torch.zeros_like(a).index_put([i], r, accumulate=True), _rows),
    "addend_second": (lambda a, i, r: torch.zeros(9, 5, dtype=torch.float64).index_put([i], r, True) + a, _rows),
    "unsafe": (lambda a, i, r: a + aten._unsafe_index_put(torch.zeros_like(a), [i], r, True), _rows),
    "two_indices": (lambda a, i, j, r: a + torch.zeros_like(a).index_put([i, j], r, accumulate=True),
                    lambda: (torch.randn(4, 6), torch.tensor([0, 3, 3, 1]), torch.tensor([5, 2, 2, 0]),
                             torch.randn(4))),
    "float32_3d": (lambda a, i, r: a + torch.zeros_like(a).index_put([i], r, accumulate=True),
                   lambda: (torch.randn(7, 3, 2), torch.tensor([6, 0, 6, 6]), torch.randn(4, 3, 2))),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_rewrite_equals_eager(trace: Callable[..., GraphModule], name: str) -> None:
    fn, make = CASES[name]
    torch.manual_seed(0)
    args = make()
    gm = trace(fn, *args)
    assert count(gm, aten.add.Tensor) == 1
    assert run(gm)
    assert count(gm, aten.add.Tensor) == 0 and count(gm, *PUTS) == 1
    got, want = gm(*args), fn(*args)
    assert got.dtype == want.dtype and got.shape == want.shape and got.stride() == want.stride()
    torch.testing.assert_close(got, want)


def _two_readers(a: torch.Tensor, i: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    g = torch.zeros_like(a).index_put([i], r, accumulate=True)
    return (a + g) * g


KEPT: dict[str, tuple[Callable[..., torch.Tensor], Callable[[], tuple[torch.Tensor, ...]]]] = {
    "alpha": (lambda a, i, r: torch.add(a, torch.zeros_like(a).index_put([i], r, True), alpha=2.0), _rows),
    "not_accumulating": (lambda a, i, r: a + torch.zeros_like(a).index_put([i], r[:1].expand(12, 5)), _rows),
    "nonzero_fill": (lambda a, i, r: a + torch.ones_like(a).index_put([i], r, accumulate=True), _rows),
    "broadcast_addend": (lambda a, i, r: a[0] + torch.zeros_like(a).index_put([i], r, accumulate=True), _rows),
    "promoting_addend": (lambda a, i, r: a.float() + torch.zeros_like(a).index_put([i], r, accumulate=True),
                         _rows),
    "second_reader": (_two_readers, _rows),
}


@pytest.mark.parametrize("name", sorted(KEPT))
def test_other_sums_are_kept(trace: Callable[..., GraphModule], name: str) -> None:
    fn, make = KEPT[name]
    torch.manual_seed(0)
    args = make()
    gm = trace(fn, *args)
    adds = count(gm, aten.add.Tensor)
    assert adds == 1
    run(gm)
    assert count(gm, aten.add.Tensor) == adds
    torch.testing.assert_close(gm(*args), fn(*args))
