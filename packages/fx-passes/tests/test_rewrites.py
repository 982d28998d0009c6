"""Constant folding, view pairs, addmm fold/unfold and reinplacing on real ATen graphs."""

from __future__ import annotations

import pytest
import torch
from coil.fx_passes import (
    InvariantViolation,
    PassManager,
    Stage,
    dead_code_elimination,
    fold_addmm,
    fold_constants,
    reinplace,
    simplify_view_pairs,
    unfold_addmm,
)
from torch import nn
from torch.fx import GraphModule

aten = torch.ops.aten


def run(gm: GraphModule, *passes: object) -> bool:
    return PassManager(list(passes), stage=Stage.POST_GRAD).run(gm).modified  # type: ignore[arg-type]


def targets(gm: GraphModule) -> list[object]:
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def test_fold_uniform_operand_and_all_uniform(trace) -> None:
    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = x / torch.full([], 8.0) + torch.ones(4) * torch.full((4,), 3.0)
        return y, x * torch.zeros(4)

    x = torch.randn(4)
    gm = trace(f, x)
    assert targets(gm).count(aten.full.default) == 2
    assert run(gm, fold_constants, dead_code_elimination)
    t = targets(gm)
    assert aten.ones.default not in t and aten.zeros.default not in t
    div = next(n for n in gm.graph.nodes if n.target is aten.div.Tensor)
    assert div.args[1] == 8.0
    for got, want in zip(gm(x), f(x), strict=True):
        torch.testing.assert_close(got, want)


def test_fold_keeps_promoting_constant(trace) -> None:
    def f(i: torch.Tensor) -> torch.Tensor:
        return i + torch.full([], 2.5, dtype=torch.float64)  # 0-d fp64 promotes int to fp64

    i = torch.arange(3)
    gm = trace(f, i)
    run(gm, fold_constants)
    assert gm(i).dtype == torch.float64
    torch.testing.assert_close(gm(i), f(i))


def test_fold_rounds_through_dtype(trace) -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x * torch.full([], 0.1, dtype=torch.float16)

    x = torch.randn(8, dtype=torch.float16)
    gm = trace(f, x)
    assert run(gm, fold_constants)
    assert torch.equal(gm(x), f(x))


def test_view_and_permute_pairs(trace) -> None:
    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        a = x.transpose(0, 1).transpose(0, 1)  # identity pair
        b = y.permute(2, 0, 1).permute(1, 2, 0)  # identity pair
        c = y.view(24).view(4, 6)  # one view
        return a.sum() + b.sum() + c.exp().sum()

    x, y = torch.randn(3, 5), torch.randn(2, 3, 4)
    gm = trace(f, x, y)
    assert targets(gm).count(aten.transpose.int) == 2
    assert run(gm, simplify_view_pairs, dead_code_elimination)
    t = targets(gm)
    assert aten.transpose.int not in t and aten.permute.default not in t
    assert t.count(aten.view.default) == 1
    torch.testing.assert_close(gm(x, y), f(x, y))


def test_permute_pair_composes(trace) -> None:
    gm = trace(lambda x: x.permute(1, 2, 0).transpose(0, 2).exp(), torch.randn(2, 3, 4))
    assert run(gm, simplify_view_pairs, dead_code_elimination)
    assert targets(gm).count(aten.permute.default) == 1 and aten.transpose.int not in targets(gm)
    x = torch.randn(2, 3, 4)
    torch.testing.assert_close(gm(x), x.permute(1, 2, 0).transpose(0, 2).exp())


def test_fold_addmm_2d_and_3d(trace) -> None:
    def f(x: torch.Tensor, x3: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return (x @ w + b).sum() + (x3 @ w + b).sum()

    x, x3, w, b = torch.randn(4, 8), torch.randn(2, 4, 8), torch.randn(8, 6), torch.randn(6)
    gm = trace(f, x, x3, w, b)
    assert targets(gm).count(aten.mm.default) == 2
    assert run(gm, fold_addmm, dead_code_elimination)
    t = targets(gm)
    assert t.count(aten.addmm.default) == 2 and aten.mm.default not in t
    torch.testing.assert_close(gm(x, x3, w, b), f(x, x3, w, b))


def test_fold_addmm_keeps_the_layout_of_an_add_with_a_transposed_bias(trace) -> None:
    """Regression (linalg.pinv backward): ``t + mm(a, b)`` with ``t`` transposed gives a result
    with ``t``'s strides; ``addmm`` is row-major, so folding would change the metadata the
    users (and graph outputs) were traced with. The add must stay; folding a contiguous bias
    of the same shape still happens."""

    def f(t: torch.Tensor, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return t.t() + a @ b, c + a @ b

    t, a, b, c = torch.randn(5, 3), torch.randn(3, 4), torch.randn(4, 5), torch.randn(3, 5)
    gm = trace(f, t, a, b, c)
    add_t = next(n for n in gm.graph.nodes if n.target is aten.add.Tensor)
    assert add_t.meta["val"].stride() == (1, 3)  # the add follows the transposed operand
    assert run(gm, fold_addmm, dead_code_elimination)  # verifier on: metadata stays exact
    t_after = targets(gm)
    assert t_after.count(aten.add.Tensor) == 1 and t_after.count(aten.addmm.default) == 1
    out = gm(t, a, b, c)
    assert out[0].stride() == f(t, a, b, c)[0].stride()
    for got, want in zip(out, f(t, a, b, c), strict=True):
        torch.testing.assert_close(got, want)


def test_unfold_addmm_before_pointwise_and_no_ping_pong(trace) -> None:
    def f(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.relu(nn.functional.linear(x, w, b))

    x, w, b = torch.randn(4, 8), torch.randn(6, 8), torch.randn(6)
    with torch.no_grad():
        gm = trace(f, x, w, b)
        assert aten.addmm.default in targets(gm)
        pm = PassManager([fold_addmm, unfold_addmm], stage=Stage.POST_GRAD, fixpoint=True)
        assert pm.run(gm).modified
        t = targets(gm)
        assert aten.addmm.default not in t and aten.mm.default in t
        assert not pm.run(gm).modified  # fold does not undo it
        torch.testing.assert_close(gm(x, w, b), f(x, w, b))


def test_reinplace_only_without_later_uses(trace) -> None:
    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a = x.exp()
        b = a + 1  # a is read again below: must stay functional
        c = a.view(-1) * 2  # a read through a view: the mul writes its own (fresh) buffer
        d = b * 3  # b not read later: in place
        return c, d

    x = torch.randn(2, 3)
    gm = trace(f, x)
    assert run(gm, reinplace)
    by_name = {n.name: n.target for n in gm.graph.nodes}
    assert by_name["add"] is aten.add.Tensor
    assert by_name["mul_1"] is aten.mul_.Tensor
    for got, want in zip(gm(x), f(x), strict=True):
        torch.testing.assert_close(got, want)
    assert torch.equal(x, x)  # input untouched (it is never a reinplace target)


def test_reinplace_never_writes_inputs_or_outputs(trace) -> None:
    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = x.sin()
        return y, y + 1  # y is an output: cannot be overwritten by the add

    x = torch.randn(3)
    x0 = x.clone()
    gm = trace(f, x)
    run(gm, reinplace)
    assert aten.add.Tensor in targets(gm)
    out = gm(x)
    torch.testing.assert_close(out[0], x0.sin())
    torch.testing.assert_close(x, x0)


def test_reinplace_must_run_last_in_pipeline() -> None:
    with pytest.raises(ValueError, match="last"):
        PassManager([reinplace, dead_code_elimination], stage=Stage.POST_GRAD)


def test_pass_after_reinplace_is_caught_by_verifier(trace) -> None:
    gm = trace(lambda x: (x.exp() + 1) * 2, torch.randn(3))
    PassManager([reinplace], stage=Stage.POST_GRAD).run(gm)
    with pytest.raises(InvariantViolation) as e:
        PassManager([dead_code_elimination], stage=Stage.POST_GRAD).run(gm)
    assert e.value.invariant == "no-mutation" and e.value.pass_name == "<input>"
