"""DCE, CSE, no-op removal and topological sort on real ATen graphs."""

from __future__ import annotations

import pytest
import torch
from coil.fx_passes import (
    PassManager,
    Stage,
    check_graph,
    common_subexpression_elimination,
    dead_code_elimination,
    remove_noops,
    stable_topological_sort,
)
from torch.fx import GraphModule

aten = torch.ops.aten


def run(gm: GraphModule, *passes: object) -> bool:
    return PassManager(list(passes), stage=Stage.POST_GRAD).run(gm).modified  # type: ignore[arg-type]


def targets(gm: GraphModule) -> list[object]:
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def test_dce_removes_dead_pure_chain_keeps_random(trace) -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        _ = x.exp().cos()  # dead chain
        _ = torch.rand_like(x)  # dead but random: stays
        return x + 1

    gm = trace(f, torch.randn(5))
    assert aten.exp.default in targets(gm)
    assert run(gm, dead_code_elimination)
    t = targets(gm)
    assert aten.exp.default not in t and aten.cos.default not in t
    assert any("rand" in str(x) for x in t)
    x = torch.randn(5)
    torch.testing.assert_close(gm(x), x + 1)
    assert not run(gm, dead_code_elimination)  # fixpoint: nothing more to do


def test_dce_keeps_calls_that_change_transform_levels() -> None:
    """Dynamo records torch.vmap as calls entering and leaving a vmap level, whose results are
    unused; removing them leaves the second vmap's tensors at a level that does not exist."""
    from dynamo_capture import capture

    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        a = torch.vmap(torch.mul)(x, y)
        return torch.vmap(lambda u, v: u * v + 1)(a, y)

    x, y = torch.randn(4, 3), torch.randn(4, 3)
    gm, _ = capture(f, x, y)
    levels = [n for n in gm.graph.nodes if "nesting" in str(n.target)]
    assert len(levels) == 4 and all(not n.users for n in levels)  # enter and leave, twice, unused
    PassManager([dead_code_elimination], stage=Stage.PRE_GRAD).run(gm)
    assert [n for n in gm.graph.nodes if "nesting" in str(n.target)] == levels
    (got,) = gm(x, y)  # Dynamo's graphs return a tuple
    torch.testing.assert_close(got, f(x, y))


def test_dce_keeps_context_managers_that_set_global_state() -> None:
    """Dynamo records `sdpa_kernel` and `disable_saved_tensors_hooks` as calls with unused
    results; they choose SDPA's backend and forbid hooks for the nodes between them."""
    from dynamo_capture import capture
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def f(q: torch.Tensor) -> torch.Tensor:
        with sdpa_kernel(SDPBackend.MATH):
            a = torch.nn.functional.scaled_dot_product_attention(q, q, q)
        with torch.autograd.graph.disable_saved_tensors_hooks("no hooks here"):
            return a.sin()

    gm, _ = capture(f, torch.randn(1, 2, 4, 8))
    state = [n for n in gm.graph.nodes if "sdpa_kernel" in str(n.target) or "saved_tensors_hooks" in str(n.target)]
    assert len(state) == 4 and all(not n.users for n in state)  # each manager's enter and exit
    PassManager([dead_code_elimination], stage=Stage.PRE_GRAD).run(gm)
    assert [n for n in gm.graph.nodes if n in state] == state


def test_cse_merges_pure_not_random(trace) -> None:
    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a = x.sin() * x.sin()
        r = torch.rand_like(x) + torch.rand_like(x)
        return a, r

    gm = trace(f, torch.randn(8))
    assert targets(gm).count(aten.sin.default) == 2
    assert run(gm, common_subexpression_elimination, dead_code_elimination)
    t = targets(gm)
    assert t.count(aten.sin.default) == 1
    assert sum("rand" in str(x) for x in t) == 2
    x = torch.randn(8)
    torch.testing.assert_close(gm(x)[0], x.sin() ** 2)


def test_cse_distinguishes_scalar_types(trace) -> None:
    gm = trace(lambda x: (x + 1, x + 1.0, x + True), torch.arange(4))
    assert not run(gm, common_subexpression_elimination)
    x = torch.arange(4)
    assert [o.dtype for o in gm(x)] == [torch.int64, torch.float32, torch.int64]


def test_noops_removed_numerics_equal(trace) -> None:
    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = (x.exp() * 1) / 1 + 0
        h = h.view(4, 8).permute(0, 1)[:, 0:8]
        h = h.clone().contiguous()
        return h @ y

    x, y = torch.randn(4, 8), torch.randn(8, 2)
    gm = trace(f, x, y)
    before = targets(gm)
    assert {aten.mul.Tensor, aten.div.Tensor, aten.add.Tensor, aten.clone.default} <= set(before)
    assert run(gm, remove_noops, dead_code_elimination)
    assert targets(gm) == [aten.exp.default, aten.mm.default]
    torch.testing.assert_close(gm(x, y), f(x, y))


def test_noop_keeps_promoting_and_aliasing_ops(trace) -> None:
    def f(x: torch.Tensor, i: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return x.clone(), x * 1, i * 1.0  # returned copies of inputs; int*1.0 promotes

    gm = trace(f, torch.randn(3), torch.arange(3))
    assert not run(gm, remove_noops)
    assert len(targets(gm)) == 3


def test_noop_x_times_one_on_intermediate(trace) -> None:
    gm = trace(lambda x: (x.exp() * 1).sum(), torch.randn(6))
    assert run(gm, remove_noops)
    assert aten.mul.Tensor not in targets(gm)


def test_noop_zero_pad_removed_other_pads_kept(trace) -> None:
    # Swin's window padding at a size the window divides: constant_pad_nd with every pad 0
    def f(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        h = x.exp()
        return (torch.constant_pad_nd(h, [0, 0, 0, 0]) * 2, torch.constant_pad_nd(h, [0, 1]),
                torch.constant_pad_nd(h, [0, -1]), torch.constant_pad_nd(h.t(), [0, 0]) + 1)

    x = torch.randn(4, 6)
    gm = trace(f, x)
    assert targets(gm).count(aten.constant_pad_nd.default) == 4
    assert run(gm, remove_noops, dead_code_elimination)
    # the zero pads go (ATen's keeps its input's layout, a transpose's too); a real pad and a
    # negative one (a slice) stay
    assert targets(gm).count(aten.constant_pad_nd.default) == 2
    for got, want in zip(gm(x), f(x), strict=True):
        torch.testing.assert_close(got, want)
        assert got.shape == want.shape and got.stride() == want.stride()


def test_noop_keeps_conj_and_neg_views(trace) -> None:
    # _conj and _neg_view have their input's layout but read it conjugated / negated: removing
    # them as identity views broke fft.ifft, polar's and linalg.eig's gradients (OpInfo sweep)
    def f(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return torch.ops.aten._conj(torch.view_as_complex(x.exp())), torch.ops.aten._neg_view(x.exp())

    x = torch.randn(3, 2)
    gm = trace(f, x)
    assert {aten._conj.default, aten._neg_view.default} <= set(targets(gm))
    run(gm, remove_noops)
    assert {aten._conj.default, aten._neg_view.default} <= set(targets(gm))
    for got, want in zip(gm(x), f(x), strict=True):
        torch.testing.assert_close(got, want)


def test_stable_topological_sort(trace) -> None:
    gm = trace(lambda x: (x.exp() + x.cos()).relu(), torch.randn(4))
    assert not run(gm, stable_topological_sort)  # sorted already: unchanged
    nodes = {n.name: n for n in gm.graph.nodes}
    order_before = [n.name for n in gm.graph.nodes]
    # Break the order: move relu (consumer) before its producers.
    nodes["exp"].prepend(nodes["relu"])
    nodes["exp"].prepend(nodes["add"])
    assert stable_topological_sort(gm).modified  # direct call: the input graph is broken
    assert [n.name for n in gm.graph.nodes] == order_before
    check_graph(gm, pass_name="stable_topological_sort")
    gm.recompile()
    x = torch.randn(4)
    torch.testing.assert_close(gm(x), (x.exp() + x.cos()).relu())


def test_topological_sort_never_moves_reads_across_mutation() -> None:
    g = torch.fx.Graph()
    x = g.placeholder("x")
    y = g.call_function(aten.clone.default, (x,))
    m = g.call_function(aten.add_.Tensor, (y, 1))
    r = g.call_function(aten.mul.Tensor, (y, 2))  # reads y after the mutation
    e = g.call_function(aten.exp.default, (x,))  # independent, after the mutation
    g.output((m, r, e))
    gm = GraphModule(torch.nn.Module(), g)
    assert not stable_topological_sort(gm).modified
    # A read placed before the write but needing a value defined after it cannot be fixed
    # without moving it across the write: the sort refuses instead of reordering silently.
    r.args = (y, e)
    m.prepend(r)
    with pytest.raises(ValueError, match="cycle"):
        stable_topological_sort(gm)
