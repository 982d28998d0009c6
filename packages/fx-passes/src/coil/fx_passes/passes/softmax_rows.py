"""A softmax over the last dim, recognised in its graph forms and recomputed on padded rows.

A softmax row over ``y`` padded at its end with ``-inf`` holds the row of the softmax over ``y``
followed by exact zeros: ``exp(-inf - max) = 0`` adds nothing to the sum. A row of ``y`` whose
softmax is NaN (all ``-inf``, or a ``+inf`` in it) stays NaN, and ``_safe_softmax`` still gives
0 for an all ``-inf`` row. :mod:`.pad_mm` widens attention probabilities this way: the padded
softmax is still one reduction kernel (over the padded row), where a pad of its result would be
a second kernel (a pointwise over another shape than the reduction's).

Forms recognised, ``d`` the last dim:

* ``_softmax(y, d, half_to_float)`` and ``_safe_softmax(y, d[, dtype])``;
* the decomposition ``div(exp(sub(y, amax(y, [d], True))), sum(exp(...), [d], True))``, with
  the cast of a half-precision result after it;
* ``_safe_softmax``'s decomposition ``where(c, full_like(s, 0), s)`` of that, with ``c`` one
  flag per row.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from coil.fx_passes.ops import overload_of
from torch.fx import GraphModule, Node
from torch.fx.node import Argument

__all__ = ["Softmax", "recompute_on_padded_rows", "softmax_of"]

aten = torch.ops.aten
prims = torch.ops.prims

_OPS = frozenset({aten._softmax.default, aten._safe_softmax.default})


@dataclass(frozen=True)
class Softmax:
    """A softmax in a graph: ``source`` normalised along its last dim by ``nodes`` (graph
    order, the result last)."""

    source: Node
    nodes: tuple[Node, ...]

    @property
    def result(self) -> Node:
        return self.nodes[-1]


def _val(node: Argument) -> torch.Tensor | None:
    v = node.meta.get("val") if isinstance(node, Node) else None
    return v if isinstance(v, torch.Tensor) else None


def _over_last_dim(x: Argument, dims: Argument) -> bool:
    v = _val(x)
    ds = list(dims) if isinstance(dims, list | tuple) else [dims]
    return v is not None and v.dim() > 0 and len(ds) == 1 and isinstance(ds[0], int) and ds[0] % v.dim() == v.dim() - 1


def _keeps_dim(node: Node) -> bool:
    return (node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False)) is True


def _is_cast(node: Node) -> bool:
    """A dtype conversion alone (the decomposition's cast of a half-precision result)."""
    if overload_of(node) is aten._to_copy.default:
        return len(node.args) == 1 and set(node.kwargs) <= {"dtype"}
    return overload_of(node) is prims.convert_element_type.default


def _decomposed(p: Node) -> Softmax | None:
    node, cast = p, []
    if _is_cast(node) and isinstance(node.args[0], Node):
        cast, node = [node], node.args[0]
    if overload_of(node) is not aten.div.Tensor:
        return None
    e, s = node.args[:2]
    if not isinstance(e, Node) or not isinstance(s, Node) or overload_of(e) is not aten.exp.default:
        return None
    if overload_of(s) is not aten.sum.dim_IntList or s.args[0] is not e or not _keeps_dim(s):
        return None
    sub = e.args[0]
    if not isinstance(sub, Node) or overload_of(sub) is not aten.sub.Tensor or len(sub.args) != 2:
        return None
    y, m = sub.args
    if not isinstance(y, Node) or not isinstance(m, Node) or overload_of(m) is not aten.amax.default:
        return None
    if m.args[0] is not y or not _keeps_dim(m) or not _over_last_dim(y, m.args[1]) or not _over_last_dim(e, s.args[1]):
        return None
    return Softmax(y, (m, sub, e, s, node, *cast))


def _safe_decomposed(p: Node) -> Softmax | None:
    if overload_of(p) is not aten.where.self or len(p.args) != 3:
        return None
    c, z, s = p.args
    cv = _val(c)
    if not isinstance(z, Node) or not isinstance(s, Node) or cv is None or cv.dim() == 0 or cv.shape[-1] != 1:
        return None
    if overload_of(z) is not aten.full_like.default or z.args[:2] != (s, 0):
        return None
    inner = _decomposed(s)
    return None if inner is None else Softmax(inner.source, (*inner.nodes, z, p))


def softmax_of(p: Node, *, exclusive: bool = True) -> Softmax | None:
    """The softmax over the last dim whose result is ``p``, in any recognised form (module
    docstring), or None. ``exclusive``: also None when a node of it other than the result has
    a user outside it (recomputing it would then leave the old one running too)."""
    if overload_of(p) in _OPS:
        src = p.args[0]
        sm = Softmax(src, (p,)) if isinstance(src, Node) and _over_last_dim(src, p.args[1]) else None
    else:
        sm = _decomposed(p) or _safe_decomposed(p)
    if sm is None or _val(sm.source) is None:
        return None
    inside = set(sm.nodes)
    if exclusive and any(u not in inside for n in sm.nodes[:-1] for u in n.users):
        return None
    return sm


def recompute_on_padded_rows(gm: GraphModule, sm: Softmax, pad: int) -> list[Node]:
    """New nodes, inserted before ``sm``'s result: ``sm.source`` padded with ``pad`` columns of
    ``-inf`` (``constant_pad_nd``) and the softmax over it, the same form, result last. Their
    ``meta["val"]`` is still the old one's: the caller refreshes it."""
    env: dict[Node, Node] = {}
    with gm.graph.inserting_before(sm.result):
        padded = gm.graph.call_function(aten.constant_pad_nd.default, (sm.source, [0, pad], float("-inf")))
        env[sm.source] = padded
        for node in sm.nodes:
            env[node] = gm.graph.node_copy(node, lambda a: env.get(a, a))
    return [padded, *(env[n] for n in sm.nodes)]
