"""ALiBi biases recognised by their structure: ``slopes[:, None, None] * (j - i)`` made causal.

The recognised bias is ``P + M`` (either order) or ``P.masked_fill(U, -inf)`` where ``M`` is an
additive causal mask and ``U`` its upper triangle (both computed from sizes alone, evaluated at
compile time by :func:`~coil.fx_passes.passes.causal_mask.static_value`), and ``P`` is
``slopes_view * R`` (either order), optionally cast to the query's dtype, where ``R`` is computed
from sizes alone and equals ``j - i`` over the L x S grid, and ``slopes_view`` reshapes a 1-D
tensor of H slopes to (H, 1, 1) or (1, H, 1, 1) by views only. The product must be computed in
float32 (slopes of float32/bfloat16/float16, exact there) and have the query's dtype after the
optional cast, so that the model's bias is ``round_to(q.dtype, slopes[h] * (j - i))`` where
causal, which is what the op computes from ``alibi=slopes``.

Models whose ALiBi is per key (BLOOM, MPT, Falcon: ``slopes * j`` from the attention mask's
cumulative sum, shift-invariant under softmax) are not this form: their bias stays a tensor.
"""

from __future__ import annotations

from typing import Any

import torch
from coil.fx_passes.passes.attention_forms import kind_of
from coil.fx_passes.passes.causal_mask import CAUSAL, mask_form, static_value, value_of
from torch.fx import Node

__all__ = ["alibi_slopes"]

_SLOPE_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _causal_product(bias: Node, length: int, source: int, cache: dict[Node, Any]) -> Node | None:
    """``P`` when ``bias`` is ``P`` with the causal mask applied (``P + M`` or
    ``P.masked_fill(U, -inf)``)."""
    kind = kind_of(bias)
    if kind == "add" and len(bias.args) == 2 and bias.kwargs.get("alpha", 1) == 1:
        a, b = bias.args
        for p, m in ((a, b), (b, a)):
            mv = static_value(m, cache) if isinstance(m, Node) and isinstance(p, Node) else None
            if mv is not None and mv.is_floating_point() and mask_form(mv, length, source) == CAUSAL:
                assert isinstance(p, Node)
                return p
    if kind == "masked_fill" and len(bias.args) == 3 and bias.args[2] == float("-inf"):
        p, u = bias.args[0], bias.args[1]
        uv = static_value(u, cache) if isinstance(u, Node) else None
        if isinstance(p, Node) and uv is not None and uv.dtype == torch.bool and mask_form(~uv, length, source) == CAUSAL:
            return p
    return None


def _is_relative_position(rv: torch.Tensor, length: int, source: int) -> bool:
    """``rv`` (broadcast over size-1 leading dims) equals ``j - i`` on the L x S grid."""
    if rv.dim() < 2 or any(s != 1 for s in rv.shape[:-2]) or rv.is_complex() or rv.dtype == torch.bool:
        return False
    if tuple(rv.shape[-2:]) != (length, source):
        return False
    want = torch.arange(source, dtype=torch.float64)[None, :] - torch.arange(length, dtype=torch.float64)[:, None]
    return bool((rv.to(torch.float64) == want).all())


def _slopes(node: object, heads: int) -> Node | None:
    """The 1-D (H,) tensor that ``node``, of shape (H, 1, 1) or (1, H, 1, 1), views."""
    v = value_of(node)
    if not isinstance(node, Node) or v is None or tuple(v.shape) not in ((heads, 1, 1), (1, heads, 1, 1)):
        return None
    while True:
        v = value_of(node)
        if v is None or v.numel() != heads:
            return None
        if v.dim() == 1:
            return node if v.dtype in _SLOPE_DTYPES else None
        kind = kind_of(node)
        if not node.args or not isinstance(node.args[0], Node):
            return None
        if kind == "getitem":
            index = node.args[1]
            index = index if isinstance(index, tuple) else (index,)
            if not all(i is None or i is Ellipsis or i == slice(None) for i in index):
                return None
        elif kind not in ("unsqueeze", "reshape"):
            return None
        node = node.args[0]


def alibi_slopes(bias: Node, q: torch.Tensor, length: int, source: int, cache: dict[Node, Any]) -> Node | None:
    """The 1-D slopes node when ``bias`` is an ALiBi bias for queries ``q`` (module rule), else
    None."""
    heads = q.shape[1]
    if q.dtype not in _SLOPE_DTYPES or not isinstance(heads, int):
        return None
    product = _causal_product(bias, length, source, cache)
    if product is None:
        return None
    pv = value_of(product)
    if kind_of(product) == "cast" and product.args and isinstance(product.args[0], Node):
        product = product.args[0]
    mv = value_of(product)
    if pv is None or mv is None or pv.dtype != q.dtype or mv.dtype != torch.float32:
        return None
    if kind_of(product) != "mul" or len(product.args) != 2 or product.kwargs:
        return None
    a, b = product.args
    for s, r in ((a, b), (b, a)):
        rv = static_value(r, cache) if isinstance(r, Node) else None
        if rv is not None and _is_relative_position(rv, length, source):
            return _slopes(s, heads)
    return None
