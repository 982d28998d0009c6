"""The FakeTensor metadata updater, and the verify knob in tests."""

from __future__ import annotations

import pytest
import torch
from coil.fx_passes import check_graph, knobs, refresh_meta

aten = torch.ops.aten


def test_refresh_meta_propagates_incrementally(trace) -> None:
    gm = trace(lambda x: x.sum(1).exp().neg(), torch.randn(3, 4))
    s = next(n for n in gm.graph.nodes if n.target is aten.sum.dim_IntList)
    neg = next(n for n in gm.graph.nodes if n.target is aten.neg.default)
    neg_val = neg.meta["val"]
    s.args = (s.args[0], [0])  # the edit: sum over the other dim -> shape [4]
    changed = refresh_meta(gm, [s])
    assert [n.name for n in changed] == ["sum_1", "exp", "neg"]
    assert tuple(neg.meta["val"].shape) == (4,) and neg.meta["val"] is not neg_val
    check_graph(gm, pass_name="edit")


def test_refresh_meta_stops_when_nothing_changes(trace) -> None:
    gm = trace(lambda x: x.relu().exp(), torch.randn(3))
    relu = next(n for n in gm.graph.nodes if n.target is aten.relu.default)
    exp = next(n for n in gm.graph.nodes if n.target is aten.exp.default)
    old = exp.meta["val"]
    relu.target = aten.sigmoid.default  # same metadata
    assert refresh_meta(gm, [relu]) == []
    assert exp.meta["val"] is old


def test_verify_is_on_in_tests() -> None:
    assert knobs.verify is True


class _Tril(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor]:
        return (torch.tril(x, 1) * 2,)  # decomposes to two equal aranges and a view of each


def test_repair_stale_aliasing_after_aot_cse() -> None:
    """Regression (tril/triu/linalg.cholesky in the OpInfo sweep): AOTAutograd's CSE merges the
    two aranges, but the view of the dropped one keeps a value aliasing the dropped storage."""
    from coil.fx_passes import InvariantViolation, run_post_grad_passes
    from coil.fx_passes.fake_meta import repair_stale_aliasing
    from torch._decomp import get_decompositions
    from torch._functorch.aot_autograd import aot_module_simplified, make_boxed_func
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    graphs: list[torch.fx.GraphModule] = []

    def keep(g: torch.fx.GraphModule, _: object) -> object:
        graphs.append(g)
        return make_boxed_func(g.forward)

    aot_module_simplified(torch.fx.symbolic_trace(_Tril()), [torch.randn(4, 4, requires_grad=True)],
                          fw_compiler=keep, bw_compiler=keep, decompositions=get_decompositions([aten.tril]),
                          partition_fn=min_cut_rematerialization_partition)  # as coil.backend
    gm = graphs[0]
    views = [n for n in gm.graph.nodes if n.target is aten.unsqueeze.default]
    aranges = {a for v in views for a in v.all_input_nodes}
    assert len(views) == 2 and len(aranges) == 1  # merged by CSE
    stale = [v for v in views if v.meta["val"].untyped_storage()._cdata
             != v.args[0].meta["val"].untyped_storage()._cdata]
    assert stale  # the input graph itself is inconsistent ...
    with pytest.raises(InvariantViolation, match="aliasing"):
        check_graph(gm, pass_name="<input>")
    assert repair_stale_aliasing(gm) == stale  # ... until repaired
    check_graph(gm, pass_name="<input>")
    assert all(v.meta["val"].untyped_storage()._cdata == v.args[0].meta["val"].untyped_storage()._cdata
               for v in views)
    x = torch.randn(4, 4)
    torch.testing.assert_close(run_post_grad_passes(gm, is_backward=False)(x)[0], torch.tril(x, 1) * 2)


@pytest.mark.parametrize(
    ("op", "always"),
    [
        (aten.view.default, True),
        (aten.permute.default, True),
        (aten.expand.default, True),
        (aten.slice.Tensor, True),
        (aten.unsqueeze.default, True),
        (aten.reshape.default, False),  # CompositeImplicitAutograd: may copy
        (aten.contiguous.default, False),
        (aten.split.Tensor, False),  # several results
        (aten.add_.Tensor, False),  # writes its argument
        (aten.add.Tensor, False),
    ],
)
def test_plain_views_skipped_by_repair_stale_aliasing(op: torch._ops.OpOverload, always: bool) -> None:
    from coil.fx_passes.fake_meta import _always_views_first_arg

    assert _always_views_first_arg(op) is always
