"""Removal of no-op ops (a table of rules)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from coil.fx_passes.aliasing import storages_of
from coil.fx_passes.infra import PassResult, Stage, graph_pass
from coil.fx_passes.ops import is_view_op, overload_of
from coil.fx_passes.rewrite import forward_is_safe, replace_with_existing
from torch.fx import GraphModule, Node

__all__ = ["NOOP_RULES", "NoopRule", "remove_noops"]

aten = torch.ops.aten


@dataclass(frozen=True)
class NoopRule:
    """A no-op rule: ``source(node)`` names the existing node equal to ``node``, or ``None``.

    The pass still checks metadata equality and the aliasing rule before forwarding.
    """

    name: str
    source: Callable[[Node], Node | None]


def _first_tensor_arg(node: Node) -> Node | None:
    arg = node.args[0] if node.args else None
    return arg if isinstance(arg, Node) else None


def _identity_scalar(identity: int) -> Callable[[Node], Node | None]:
    def source(node: Node) -> Node | None:
        if len(node.args) < 2:
            return None
        other = node.args[1]
        if isinstance(other, bool) or not isinstance(other, (int, float)) or other != identity:
            return None
        if node.kwargs.get("alpha", 1) != 1 and identity != 0:
            return None
        return _first_tensor_arg(node)

    return source


_ARITH: dict[torch._ops.OpOverload, int] = {
    aten.add.Tensor: 0, aten.add.Scalar: 0, aten.sub.Tensor: 0, aten.sub.Scalar: 0,
    aten.mul.Tensor: 1, aten.mul.Scalar: 1, aten.div.Tensor: 1, aten.div.Scalar: 1,
    aten.pow.Tensor_Scalar: 1,
}  # fmt: skip
_COPIES = frozenset({aten.clone.default, aten._to_copy.default, aten.contiguous.default})


def _arith_source(node: Node) -> Node | None:
    op = overload_of(node)
    return _identity_scalar(_ARITH[op])(node) if op in _ARITH else None


def _view_source(node: Node) -> Node | None:
    """A view whose result has its input's shape, strides and offset is the input itself."""
    if not is_view_op(node):
        return None
    src = _first_tensor_arg(node)
    if src is None or not (storages_of(node.meta.get("val")) & storages_of(src.meta.get("val"))):
        return None
    val, src_val = node.meta.get("val"), src.meta.get("val")
    if isinstance(val, torch.Tensor) and isinstance(src_val, torch.Tensor) and (
            (val.is_conj(), val.is_neg()) != (src_val.is_conj(), src_val.is_neg())):
        return None  # _conj / _neg_view: same layout, but the view reads its values negated
    return src


def _copy_source(node: Node) -> Node | None:
    """A clone/_to_copy that changes no metadata equals its input (if aliasing allows)."""
    if overload_of(node) not in _COPIES:
        return None
    if set(node.kwargs) - {"dtype", "device", "layout", "memory_format", "pin_memory"}:
        return None
    return _first_tensor_arg(node)


def _zero_pad_source(node: Node) -> Node | None:
    """A constant_pad_nd whose every pad is 0 (a window padding that the input's size made
    empty, as Swin's at 224 x 224) copies its input."""
    if overload_of(node) is not aten.constant_pad_nd.default or len(node.args) < 2:
        return None
    pad = node.args[1]
    if not isinstance(pad, list | tuple) or not all(type(p) is int and p == 0 for p in pad):
        return None
    return _first_tensor_arg(node)


NOOP_RULES: tuple[NoopRule, ...] = (
    NoopRule("arithmetic-identity", _arith_source),  # x+0, x-0, x*1, x/1, x**1
    NoopRule("identity-view", _view_source),  # view/reshape/expand/permute/slice to the same layout
    NoopRule("metadata-preserving-copy", _copy_source),  # clone, _to_copy to the same dtype
    NoopRule("zero-pad", _zero_pad_source),  # constant_pad_nd(x, [0, 0, ...])
)


@graph_pass("remove_noops", stages=frozenset({Stage.JOINT, Stage.POST_GRAD}))
def remove_noops(gm: GraphModule) -> PassResult:
    """Forward the uses of ops that return their input unchanged to that input.

    Stage: joint, post-grad. Rules: :data:`NOOP_RULES`.

    Args:
        gm: the graph module, edited in place.

    Returns:
        ``PassResult(gm, modified)``.

    Example::

        before: a = aten.mul(x, 1); b = aten.view(a, [4, 8]) (x is [4, 8]); return aten.relu(b)
        after:  return aten.relu(x)

    Soundness: a rule only proposes; the node is replaced when its ``meta["val"]`` has the same
    shape, stride, offset, dtype and device as the source (so ``int * 1.0``, which promotes, is
    kept) and :func:`coil.fx_passes.rewrite.forward_is_safe` allows it: ``clone(x)`` of a graph
    input that reaches an output stays, as does anything that would make two outputs share
    storage. ``x + 0`` turns ``-0.0`` into ``+0.0``; removing it keeps ``-0.0`` (equal under
    ``==``). Users' ``meta["val"]`` are refreshed (their aliasing may move to the source).
    """
    modified = False
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or "val" not in node.meta:
            continue
        for rule in NOOP_RULES:
            src = rule.source(node)
            if src is not None and forward_is_safe(gm, node, src):
                replace_with_existing(gm, node, src)
                modified = True
                break
    return PassResult(gm, modified)
