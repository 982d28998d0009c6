"""Scatter of one value per row into a constant fill becomes a pointwise ``where``.

``nll_loss_backward`` decomposes to ``scatter(full_like(x, 0), 1, target[:, None], -w)``: a
``[N, V]`` fill, then a scatter kernel over it, a materialised buffer the size of the logits.
When the scattered-into tensor is a uniform constant and the index has size 1 along ``dim``
(one target per row), the result is elementwise:

    out[..., v, ...] = value if v == index[..., 0, ...] else fill

which ``where(iota(V) == index, value, fill)`` computes, broadcasting the index along ``dim``
(TorchInductor has the same idea as ``scatter_upon_const_tensor``; this is coil's own pass).
The scheduler then fuses it into its consumers (log_softmax's backward), so no buffer is left.
"""

from __future__ import annotations

import torch
from coil.fx_passes.fake_meta import compute_val, describe_mismatch, fake_mode_of, refresh_meta
from coil.fx_passes.infra import PassResult, Stage, graph_pass
from coil.fx_passes.ops import overload_of
from coil.fx_passes.passes.constant_fold import rounded, uniform_value
from torch.fx import GraphModule, Node
from torch.fx.experimental.symbolic_shapes import statically_known_true

__all__ = ["scatter_to_where"]

aten = torch.ops.aten
prims = torch.ops.prims

_SCATTERS = frozenset({aten.scatter.value, aten.scatter.src})


def _val(node: object) -> torch.Tensor | None:
    v = node.meta.get("val") if isinstance(node, Node) else None
    return v if isinstance(v, torch.Tensor) else None


def _same_size(a: object, b: object) -> bool:
    return bool(statically_known_true(a == b))


def _rewritable(node: Node) -> tuple[int, int, Node | float | int | bool, float | int | bool] | None:
    """(dim, size along dim, value or src node, fill) when ``node`` can become a ``where``."""
    if node.kwargs or len(node.args) != 4:
        return None
    base, dim, index, src = node.args
    out, idx = _val(node), _val(index)
    fill = uniform_value(base)
    if out is None or idx is None or fill is None or not isinstance(dim, int) or out.dim() == 0:
        return None
    d = dim % out.dim()
    size = out.shape[d]
    if not isinstance(size, int) or size == 0 or idx.dim() != out.dim() or not _same_size(idx.shape[d], 1):
        return None
    # every position of the output is one index position broadcast along dim: index covers
    # the other dims exactly (a smaller index scatters into a part of the rows only)
    if any(not _same_size(idx.shape[k], out.shape[k]) for k in range(out.dim()) if k != d):
        return None
    if overload_of(node) is aten.scatter.src:
        sv = _val(src)
        if sv is None or sv.dtype != out.dtype or sv.dim() != idx.dim():
            return None
        if any(not _same_size(a, b) for a, b in zip(sv.shape, idx.shape, strict=True)):
            return None  # src larger than index: its extra elements are not scattered
        return d, size, src, fill  # type: ignore[return-value]
    if not isinstance(src, bool | int | float):
        return None
    value = rounded(src, out.dtype)  # what scatter stores: value in out's dtype
    return d, size, value, fill


def _rewrite(gm: GraphModule, node: Node) -> bool:
    got = _rewritable(node)
    if got is None:
        return False
    d, size, value, fill = got
    out = _val(node)
    assert out is not None
    index = node.args[2]
    graph = gm.graph
    fake_mode = fake_mode_of(gm)
    assert fake_mode is not None
    created: list[Node] = []

    def call(target: object, args: tuple[object, ...], kwargs: dict[str, object] | None = None) -> Node:
        n = graph.call_function(target, args, kwargs or {})  # type: ignore[arg-type]
        n.meta["val"] = compute_val(n, fake_mode)
        if "stack_trace" in node.meta:
            n.meta["stack_trace"] = node.meta["stack_trace"]
        created.append(n)
        return n

    def scalar(v: float | int | bool) -> Node:
        return call(aten.scalar_tensor.default, (v,), {"dtype": out.dtype, "device": out.device})

    with graph.inserting_before(node):
        iota = call(prims.iota.default, (size,), {"start": 0, "step": 1, "dtype": torch.int64,
                                                   "device": out.device, "requires_grad": False})
        if out.dim() > 1:
            shape = [1] * out.dim()
            shape[d] = size
            iota = call(aten.view.default, (iota, shape))
        hit = call(aten.eq.Tensor, (iota, index))
        chosen = value if isinstance(value, Node) else scalar(value)
        where = call(aten.where.self, (hit, chosen, scalar(fill)))
    if describe_mismatch(out, where.meta["val"]) is not None:  # e.g. a fill with other strides
        for n in reversed(created):
            graph.erase_node(n)
        return False
    users = list(node.users)
    node.replace_all_uses_with(where)
    graph.erase_node(node)
    refresh_meta(gm, users)
    return True


@graph_pass("scatter_to_where", stages=frozenset({Stage.JOINT, Stage.POST_GRAD}))
def scatter_to_where(gm: GraphModule) -> PassResult:
    """Rewrite a scatter of one value per row into a constant fill as a pointwise ``where``.

    Stage: joint, post-grad.

    Args:
        gm: the graph module, edited in place.

    Returns:
        ``PassResult(gm, modified)``. The fill nodes left unused are removed by DCE.

    Example::

        before: z = full_like(x, 0.0); g = scatter.value(z, 1, t, -1.0)      # t: [N, 1]
        after:  i = view(iota(V), [1, V]); g = where(eq(i, t), scalar_tensor(-1.0),
                                                     scalar_tensor(0.0))

    Soundness: ``scatter(base, dim, index, src)`` writes ``src[p]`` at ``p`` with
    ``p[dim] = index[p]``, for every position ``p`` of ``index``, over a copy of ``base``.
    The pass fires only when ``base`` is a uniform constant (``full``, ``zeros``, ``ones``,
    their ``_like`` forms, ``scalar_tensor``), ``index`` has size 1 along ``dim`` (so no two
    positions of ``index`` write the same element: no duplicates to order) and the output's
    size on every other dim (so every output element has exactly one index position, its own
    row), and ``src`` is a scalar (converted to the output dtype, as scatter stores it) or a
    tensor of ``index``'s shape and the output's dtype. Then element ``q`` of the output is
    ``src[q with dim 0]`` if ``q[dim] == index[q with dim 0]`` else the fill, which is the
    ``where`` (index and src broadcast along ``dim``). The output's size along ``dim`` must be
    static (it sizes the ``iota``); the rewrite is dropped when the ``where``'s metadata
    (strides: a fill laid out unlike a fresh tensor) differs from the scatter's. An index out
    of range, an error in eager, selects nothing here.
    """
    modified = False
    for node in list(gm.graph.nodes):
        if overload_of(node) in _SCATTERS and _rewrite(gm, node):
            modified = True
    return PassResult(gm, modified)
