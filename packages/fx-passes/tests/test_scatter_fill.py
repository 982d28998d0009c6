"""scatter_to_where: a scatter of one value per row into a constant fill becomes a where."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from coil.fx_passes import (
    PassManager,
    Stage,
    dead_code_elimination,
    run_post_grad_passes,
    scatter_to_where,
)
from torch._decomp import get_decompositions
from torch._functorch.aot_autograd import aot_module_simplified, make_boxed_func
from torch.fx import GraphModule

aten = torch.ops.aten
SCATTERS = (aten.scatter.value, aten.scatter.src)


def run(gm: GraphModule) -> bool:
    passes = [scatter_to_where, dead_code_elimination]
    return PassManager(passes, stage=Stage.POST_GRAD).run(gm).modified


def scatters(gm: GraphModule) -> int:
    return sum(n.target in SCATTERS for n in gm.graph.nodes)


def test_nll_loss_backward_has_no_scatter() -> None:
    """The backward graph of cross_entropy as AOTAutograd makes it with torch's decompositions
    of nll_loss_backward (a scatter into full_like(0))."""
    graphs: list[tuple[GraphModule, GraphModule]] = []

    def compiler(g: GraphModule, _: object) -> object:
        before = copy.deepcopy(g)
        after = run_post_grad_passes(g, is_backward=bool(graphs))
        graphs.append((before, after))
        return make_boxed_func(after.forward)

    decomps = get_decompositions([aten.nll_loss_forward, aten.nll_loss_backward, aten._log_softmax,
                                  aten._log_softmax_backward_data])
    torch.manual_seed(0)
    x = torch.randn(6, 9, requires_grad=True)
    t = torch.tensor([1, 8, 0, -100, 4, 4])
    gm = torch.fx.symbolic_trace(lambda x, t: (F.cross_entropy(x, t),))
    compiled = aot_module_simplified(gm, [x, t], fw_compiler=compiler, bw_compiler=compiler,
                                     decompositions=decomps)
    xr = x.detach().clone().requires_grad_()
    (loss,) = compiled(x, t)
    loss.backward()  # compiles the backward graph
    want = F.cross_entropy(xr, t)
    want.backward()
    torch.testing.assert_close(loss, want)
    torch.testing.assert_close(x.grad, xr.grad)
    before, after = graphs[1]
    assert scatters(before) == 1
    assert scatters(after) == 0
    assert not any(n.target is aten.full_like.default for n in after.graph.nodes)


CASES = {
    "zeros_value": (lambda t: torch.zeros(4, 7).scatter(1, t, -1.0), lambda: (torch.randint(0, 7, (4, 1)),)),
    "full_value_dim0": (lambda t: torch.full((7, 4), 2.5).scatter(0, t, 3.0), lambda: (torch.randint(0, 7, (1, 4)),)),
    "ones_like_value_3d": (lambda x, t: torch.ones_like(x).scatter(2, t, 0.25),
                           lambda: (torch.randn(2, 3, 5), torch.randint(0, 5, (2, 3, 1)))),
    "src_column": (lambda t, s: torch.zeros(4, 7).scatter(1, t, s), lambda: (torch.randint(0, 7, (4, 1)), torch.randn(4, 1))),
    "src_expanded_scalar": (lambda t, s: torch.zeros(4, 7).scatter(1, t, s.expand(4, 1)),
                            lambda: (torch.randint(0, 7, (4, 1)), torch.randn(()))),
    "float64_value": (lambda t: torch.zeros(4, 7, dtype=torch.float64).scatter(1, t, 0.1),
                      lambda: (torch.randint(0, 7, (4, 1)),)),
    "float16_value": (lambda t: torch.zeros(4, 7, dtype=torch.float16).scatter(1, t, 0.1),
                      lambda: (torch.randint(0, 7, (4, 1)),)),
    "int_value_truncated": (lambda t: torch.zeros(4, 7, dtype=torch.int64).scatter(1, t, 2.7),
                            lambda: (torch.randint(0, 7, (4, 1)),)),
    "bool_value": (lambda t: torch.zeros(4, 7, dtype=torch.bool).scatter(1, t, True),
                   lambda: (torch.randint(0, 7, (4, 1)),)),
    # scatter's result is contiguous whatever the fill's strides (as the where's is)
    "transposed_fill": (lambda x, t: torch.zeros_like(x.t()).scatter(1, t, 1.0),
                        lambda: (torch.randn(7, 4), torch.randint(0, 7, (4, 1)))),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_rewrite_equals_eager(trace, name: str) -> None:
    fn, make = CASES[name]
    torch.manual_seed(0)
    args = make()
    gm = trace(fn, *args)
    assert scatters(gm) == 1
    assert run(gm)
    assert scatters(gm) == 0
    got, want = gm(*args), fn(*args)
    assert got.dtype == want.dtype and got.stride() == want.stride()
    assert torch.equal(got, want)


KEPT = {
    "two_per_row": (lambda t: torch.zeros(4, 7).scatter(1, t, 1.0), lambda: (torch.tensor([[0, 3]] * 4),)),
    "fewer_rows": (lambda t: torch.zeros(4, 7).scatter(1, t, 1.0), lambda: (torch.randint(0, 7, (2, 1)),)),
    "not_a_fill": (lambda x, t: x.scatter(1, t, 1.0), lambda: (torch.randn(4, 7), torch.randint(0, 7, (4, 1)))),
    "src_larger": (lambda t, s: torch.zeros(4, 7).scatter(1, t, s), lambda: (torch.randint(0, 7, (4, 1)), torch.randn(4, 3))),
}


@pytest.mark.parametrize("name", sorted(KEPT))
def test_other_scatters_are_kept(trace, name: str) -> None:
    fn, make = KEPT[name]
    torch.manual_seed(0)
    args = make()
    gm = trace(fn, *args)
    assert scatters(gm) == 1
    run(gm)
    assert scatters(gm) == 1
    assert torch.equal(gm(*args), fn(*args))
