"""``mm + bias`` into ``addmm``, and back out when a pointwise consumer would fuse the add."""

from __future__ import annotations

import torch
from coil.fx_passes.fake_meta import (
    compute_val,
    describe_mismatch,
    fake_mode_of,
    refresh_meta,
    users_to_refresh,
)
from coil.fx_passes.infra import PassResult, Stage, graph_pass
from coil.fx_passes.ops import is_pointwise, overload_of
from torch.fx import GraphModule, Node

__all__ = ["fold_addmm", "unfold_addmm"]

aten = torch.ops.aten
_RESHAPES = frozenset({aten.view.default, aten._unsafe_view.default})


def _consumers(node: Node) -> list[Node]:
    """Users of ``node``, looking through reshapes whose only purpose is to restore rank."""
    out: list[Node] = []
    for u in node.users:
        if overload_of(u) in _RESHAPES and u.args[0] is node:
            out.extend(_consumers(u))
        else:
            out.append(u)
    return out


def _feeds_pointwise(node: Node) -> bool:
    """True when some consumer is a pointwise op, which could fuse a bias add as its prologue."""
    return any(is_pointwise(u) for u in _consumers(node))


def _replace_if_same_meta(gm: GraphModule, old: Node, new_nodes: list[Node], result: Node) -> bool:
    """Point ``old``'s users at ``result`` when its metadata equals ``old``'s; else drop the new
    nodes and leave the graph as it was. Returns whether it replaced."""
    fake_mode = fake_mode_of(gm)
    assert fake_mode is not None
    for n in new_nodes:
        n.meta["val"] = compute_val(n, fake_mode)
    old_val = old.meta.get("val")
    if describe_mismatch(old_val, result.meta["val"]) is not None:
        # e.g. add(b, mm) with b transposed: the add's result takes b's strides, addmm's is
        # always row-major, so users (and graph outputs) would see another layout
        for n in reversed(new_nodes):
            gm.graph.erase_node(n)
        return False
    users = list(old.users)
    old.replace_all_uses_with(result)
    gm.graph.erase_node(old)
    refresh_meta(gm, users_to_refresh(users, old_val, result.meta["val"]))
    return True


def _try_fold(gm: GraphModule, add: Node) -> bool:
    if overload_of(add) is not aten.add.Tensor or add.kwargs or len(add.args) != 2:
        return False
    for mm_side, bias in (add.args, add.args[::-1]):
        if not isinstance(mm_side, Node) or not isinstance(bias, Node):
            continue
        view: Node | None = None
        mm = mm_side
        if overload_of(mm) in _RESHAPES and isinstance(mm.args[0], Node):
            view, mm = mm, mm.args[0]
        if overload_of(mm) is not aten.mm.default or len(mm.users) != 1:
            continue
        if view is not None and len(view.users) != 1:
            continue
        mv, bv, av = mm.meta.get("val"), bias.meta.get("val"), add.meta.get("val")
        if not all(isinstance(t, torch.Tensor) for t in (mv, bv, av)):
            continue
        assert isinstance(mv, torch.Tensor) and isinstance(bv, torch.Tensor)
        n_cols = mv.shape[-1]
        ok_bias = bv.dim() == 1 and bv.shape[0] == n_cols
        ok_bias |= (
            view is None and bv.dim() == 2 and tuple(bv.shape) in ((1, n_cols), tuple(mv.shape))
        )
        if not ok_bias or bv.dtype != mv.dtype or _feeds_pointwise(add):
            continue
        with gm.graph.inserting_before(add):
            addmm = gm.graph.call_function(aten.addmm.default, (bias, mm.args[0], mm.args[1]))
            new = [addmm]
            result = addmm
            if view is not None:
                result = gm.graph.call_function(view.target, (addmm, view.args[1]))  # type: ignore[arg-type]
                new.append(result)
        if not _replace_if_same_meta(gm, add, new, result):
            continue
        for dead in (view, mm):
            if dead is not None and not dead.users:
                gm.graph.erase_node(dead)
        return True
    return False


@graph_pass("fold_addmm", stages=frozenset({Stage.JOINT, Stage.POST_GRAD}))
def fold_addmm(gm: GraphModule) -> PassResult:
    """Fuse ``add(mm(a, b), bias)`` (optionally through a reshape) into ``addmm(bias, a, b)``.

    Stage: joint, post-grad.

    Args:
        gm: the graph module, edited in place.

    Returns:
        ``PassResult(gm, modified)``.

    Example::

        before: m = mm(a, w); o = add(m, b)           (b: [N], nothing pointwise reads o)
        after:  o = addmm(b, a, w)
        before: m = mm(view(x), w); v = view(m, [B, S, N]); o = add(v, b)
        after:  o = view(addmm(b, view(x), w), [B, S, N])

    Soundness: ``mm`` (and the reshape) must have no other user; the bias must be 1-D of the
    output's column count (or 2-D ``[1, N]``/``[M, N]`` without a reshape) and of the same
    dtype; the ``addmm`` result (row-major) must have the add's exact layout, so an add whose
    result follows a transposed bias's strides is left alone. When a pointwise op reads the sum,
    the add is left for it to fuse (see
    :data:`unfold_addmm`, which uses the same test, so the two never undo each other). BLAS
    may sum in another order than mm-then-add (results agree to rounding).
    """
    modified = False
    for node in list(gm.graph.nodes):
        if node.op == "call_function" and "val" in node.meta and _try_fold(gm, node):
            modified = True
    return PassResult(gm, modified)


@graph_pass("unfold_addmm", stages=frozenset({Stage.JOINT, Stage.POST_GRAD}))
def unfold_addmm(gm: GraphModule) -> PassResult:
    """Split ``addmm(bias, a, b)`` into ``add(mm(a, b), bias)`` when a pointwise op consumes it.

    Stage: joint, post-grad.

    Args:
        gm: the graph module, edited in place.

    Returns:
        ``PassResult(gm, modified)``.

    Example::

        before: o = addmm(b, x, w); r = relu(o)
        after:  m = mm(x, w); o = add(m, b); r = relu(o)      (add + relu: one fused kernel)

    Soundness: only ``addmm`` with default ``beta``/``alpha`` and a bias that broadcasts to
    the product without changing its shape or dtype; the new nodes' metadata must equal the
    old result's (checked), so consumers see the same tensor layout.
    """
    modified = False
    fake_mode = fake_mode_of(gm)
    for node in list(gm.graph.nodes):
        if overload_of(node) is not aten.addmm.default or node.kwargs or len(node.args) != 3:
            continue
        if fake_mode is None or not _feeds_pointwise(node):
            continue
        bias, a, b = node.args
        with gm.graph.inserting_before(node):
            mm = gm.graph.call_function(aten.mm.default, (a, b))
            add = gm.graph.call_function(aten.add.Tensor, (mm, bias))
        mm.meta["val"] = compute_val(mm, fake_mode)
        add.meta["val"] = compute_val(add, fake_mode)
        if describe_mismatch(node.meta["val"], add.meta["val"]) is not None:
            gm.graph.erase_node(add)
            gm.graph.erase_node(mm)
            continue
        users = list(node.users)
        old_val = node.meta["val"]
        node.replace_all_uses_with(add)
        gm.graph.erase_node(node)
        refresh_meta(gm, users_to_refresh(users, old_val, add.meta["val"]))
        modified = True
    return PassResult(gm, modified)
