"""Keys and values that SDPA broadcasts over the query's batch or heads are widened first.

``scaled_dot_product_attention`` accepts a key and value whose leading (batch, head) dims are 1
where the query's are larger: multi-query attention written without ``repeat_kv`` (HF Falcon's
older architecture passes one key/value head to 32 query heads). On CUDA its fused kernels
(flash, memory-efficient, cuDNN) take only equal batch and head counts, so such a call runs the
math path: the full (batch, heads, L, S) score matrix is materialised, in time and memory
(Falcon's 8 x 1024 tokens: 512 MiB a layer in bf16). Widening the key and value to the query's
leading dims (copies of B*H*S*E elements each, against the math path's B*H*L*S scores) lets the
fused kernels take the call; the backward sums the widened gradients back over the broadcast
dims.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection
from typing import Any

import torch
from coil.fx_passes.infra import PassResult, Stage, graph_pass
from coil.fx_passes.passes.causal_mask import SDPA_CALLS, VALUE_KEYS, value_of
from torch.fx import GraphModule, Node
from torch.fx.experimental.symbolic_shapes import statically_known_true

__all__ = ["FUSED_NEED_EQUAL_HEADS", "broadcast_kv_widened", "widen_broadcast_kv"]

# devices whose fused SDPA kernels refuse keys and values broadcast over batch or heads (on the
# CPU the flash kernel broadcasts them itself: widening would only add a copy)
FUSED_NEED_EQUAL_HEADS = frozenset({"cuda"})


@graph_pass("widen_broadcast_kv", stages=frozenset({Stage.PRE_GRAD}))
def widen_broadcast_kv(gm: GraphModule) -> PassResult:
    """Widen the keys and values of SDPA calls on CUDA (:data:`FUSED_NEED_EQUAL_HEADS`) that
    broadcast over the query's leading dims: :func:`broadcast_kv_widened` on those devices.

    Stage: pre-grad (Dynamo's torch IR), so that AOTAutograd traces the widened call in the
    forward and the backward alike and SDPA chooses its kernel on the widened shapes.

    Args:
        gm: a torch-IR graph module, edited in place.

    Returns:
        ``PassResult(gm, modified)``; modified when a call was widened.

    Example::

        before: sdpa(q[8, 32, L, 64], k[8, 1, L, 64], v[8, 1, L, 64], is_causal=True)
        after:  sdpa(q, k.expand(8, 32, -1, -1).contiguous(), v.expand(8, 32, -1, -1).contiguous(),
                     is_causal=True)

    Soundness: SDPA broadcasts k and v over q's leading dims exactly as ``expand`` does, so
    the call computes the same values; autograd sums the widened gradients back over the
    broadcast dims, as the broadcast does. Only size-1 dims are widened, to q's sizes.
    """
    return broadcast_kv_widened(gm, FUSED_NEED_EQUAL_HEADS)


def broadcast_kv_widened(gm: GraphModule, devices: Collection[str]) -> PassResult:
    """The rule of :func:`widen_broadcast_kv` on ``devices``: every
    ``scaled_dot_product_attention(q, k, v, ...)`` there whose ``k`` or
    ``v`` broadcasts over ``q``'s leading dims ``k.expand(*q.shape[:-2], *k.shape[-2:])
    .contiguous()`` (and ``v`` likewise) in their place.

    Applies when q, k and v have the same number of dims (at least 3), each leading dim of k and
    v is 1 or q's (equal for every value of the size symbols: symbolic sizes are read from q),
    some is 1 where q's is not known to be 1, and ``enable_gqa`` is not set (grouped heads are
    the kernels' own business). The values are unchanged: SDPA broadcasts exactly so.

    Args:
        gm: a torch-IR graph module, edited in place.
        devices: device types (``"cuda"``) whose calls are widened.

    Returns:
        ``PassResult(gm, modified)``; modified when a call was widened.
    """
    modified = False
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in SDPA_CALLS or node.kwargs.get("enable_gqa", False):
            continue
        if len(node.args) < 3 or not all(isinstance(a, Node) for a in node.args[:3]):
            continue
        q, k, v = (value_of(a) for a in node.args[:3])
        if q is None or k is None or v is None or q.device.type not in devices:
            continue
        if not _widens(q, k, v):
            continue
        args = list(node.args)
        with gm.graph.inserting_before(node):
            for i in (1, 2):
                args[i] = _widen(gm, args[i], node.args[0], node)
        node.args = tuple(args)
        modified = True
    if modified:
        gm.recompile()
    return PassResult(gm, modified)


def _same(a: int | torch.SymInt, b: int | torch.SymInt) -> bool:
    """``a == b`` for every value of the size symbols (no guard is added)."""
    return bool(statically_known_true(a == b))


def _widens(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> bool:
    """k or v broadcasts over q's leading dims, and both can be widened to them: the same
    number of dims (at least 3), each leading dim of k and v 1 or (for every value of the size
    symbols) q's, and some 1 where q's is not known to be 1."""
    if not (q.dim() == k.dim() == v.dim() >= 3):
        return False
    wider = False
    for t in (k, v):
        for s, w in zip(t.shape[:-2], q.shape[:-2], strict=True):
            if _same(s, w):
                continue
            if not _same(s, 1):
                return False
            wider = True
    return wider


def _widen(gm: GraphModule, source: Any, query: Any, at: Node) -> Any:
    """``source.expand(*sizes, -1, -1).contiguous()`` as new nodes, their values stored, where
    ``sizes`` are the query's leading dims where ``source`` has 1 and -1 (kept) elsewhere; a
    symbolic size of the query is read from it by a ``size`` node. ``source`` when it has the
    query's leading dims already."""
    value, qv = value_of(source), value_of(query)
    assert isinstance(source, Node) and isinstance(query, Node) and value is not None and qv is not None
    widen = [not _same(s, w) for s, w in zip(value.shape[:-2], qv.shape[:-2], strict=True)]
    if not any(widen):
        return source
    copied: dict[str, Any] = {key: at.meta[key] for key in ("stack_trace", "nn_module_stack") if key in at.meta}
    keys: list[str] = [key for key in VALUE_KEYS if key in source.meta] or ["example_value"]
    fake = getattr(value, "fake_mode", None)

    def add(method: str, args: tuple[Any, ...], val: Any) -> Node:
        node = gm.graph.call_method(method, args)
        node.meta.update(copied)
        node.meta.update(dict.fromkeys(keys, val))
        return node

    values = [size if w else -1 for w, size in zip(widen, qv.shape[:-2], strict=True)]
    sizes = [v if isinstance(v, int) else add("size", (query, i), v) for i, v in enumerate(values)]
    with fake if fake is not None else contextlib.nullcontext():
        wide = value.expand(*values, -1, -1)
        dense_value = wide.contiguous()
    expanded = add("expand", (source, *sizes, -1, -1), wide)
    return add("contiguous", (expanded,), dense_value)
