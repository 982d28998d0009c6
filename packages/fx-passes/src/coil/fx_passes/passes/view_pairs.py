"""Collapsing chains of two views or two permutations into one (or none)."""

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
from coil.fx_passes.ops import overload_of
from coil.fx_passes.rewrite import forward_is_safe, replace_with_existing
from torch.fx import GraphModule, Node

__all__ = ["simplify_view_pairs"]

aten = torch.ops.aten
_RESHAPES = frozenset({aten.view.default, aten._unsafe_view.default, aten.reshape.default})
_PERMUTES = frozenset({aten.permute.default, aten.transpose.int, aten.t.default})


def _perm(node: Node) -> list[int] | None:
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        return None
    rank = val.dim()
    op = overload_of(node)
    if op is aten.permute.default:
        return [int(d) % rank for d in node.args[1]]  # type: ignore[union-attr,arg-type]
    if op is aten.transpose.int:
        p = list(range(rank))
        a, b = int(node.args[1]) % rank, int(node.args[2]) % rank  # type: ignore[arg-type]
        p[a], p[b] = p[b], p[a]
        return p
    if op is aten.t.default:
        return list(range(rank))[::-1]
    return None


def _rewrite(gm: GraphModule, node: Node) -> bool:
    inner = node.args[0] if node.args else None
    if not isinstance(inner, Node) or not isinstance(inner.args[0] if inner.args else None, Node):
        return False
    base = inner.args[0]
    assert isinstance(base, Node)
    op, iop = overload_of(node), overload_of(inner)
    if op in _PERMUTES and iop in _PERMUTES:
        p_outer, p_inner = _perm(node), _perm(inner)
        if p_outer is None or p_inner is None:
            return False
        composed = [p_inner[i] for i in p_outer]
        if composed == sorted(composed):
            if forward_is_safe(gm, node, base):
                replace_with_existing(gm, node, base)
                return True
            return False
        target, args = aten.permute.default, (base, composed)
        new_args: tuple[object, ...] = args
    elif op in _RESHAPES and iop in _RESHAPES:
        if op is aten._unsafe_view.default or iop is aten._unsafe_view.default:
            target = aten._unsafe_view.default
        else:
            target = aten.view.default
        new_args = (base, node.args[1])
    else:
        return False
    fake_mode = fake_mode_of(gm)
    assert fake_mode is not None
    with gm.graph.inserting_before(node):
        new = gm.graph.call_function(target, new_args)  # type: ignore[arg-type]
    try:
        new.meta["val"] = compute_val(new, fake_mode)
        ok = describe_mismatch(node.meta["val"], new.meta["val"]) is None
    except Exception:
        ok = False
    if not ok:
        gm.graph.erase_node(new)
        return False
    users = list(node.users)
    old_val = node.meta["val"]
    node.replace_all_uses_with(new)
    gm.graph.erase_node(node)
    refresh_meta(gm, users_to_refresh(users, old_val, new.meta["val"]))
    return True


@graph_pass("simplify_view_pairs", stages=frozenset({Stage.JOINT, Stage.POST_GRAD}))
def simplify_view_pairs(gm: GraphModule) -> PassResult:
    """Replace ``view(view(x))`` by one view and ``permute(permute(x))`` by one permute or ``x``.

    Stage: joint, post-grad.

    Args:
        gm: the graph module, edited in place.

    Returns:
        ``PassResult(gm, modified)``. The inner view, if now unused, goes at the next DCE.

    Example::

        before: a = transpose(x, 0, 1); b = transpose(a, 0, 1); c = view(view(y, [8]), [2, 4])
        after:  b -> x;                                       c = view(y, [2, 4])

    Soundness: the new view is accepted only if fresh fake propagation gives exactly the old
    node's shape, strides and storage offset (a view of a view is not always expressible as
    one view of the base). Forwarding to ``x`` obeys the aliasing rule. ``_unsafe_view``
    (a view that is not tracked as aliasing) stays ``_unsafe_view``.
    """
    modified = False
    for node in list(gm.graph.nodes):
        if node.op == "call_function" and "val" in node.meta and _rewrite(gm, node):
            modified = True
    return PassResult(gm, modified)
