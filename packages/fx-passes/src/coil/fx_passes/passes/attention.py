"""Attention fusion: eager attention (matmul, scale, mask, softmax, matmul) into SDPA.

The rules are data: :data:`ATTENTION_RULES` holds one rule per variant (scale by division, by
multiplication or none; with or without an additive mask), each a plain pattern function and
its replacement by ``torch.nn.functional.scaled_dot_product_attention``. The replacement is
traced at the graph's own FakeTensors, so it becomes the ATen kernel that SDPA dispatches to
for that device and those inputs (``aten._scaled_dot_product_flash_attention_for_cpu`` on CPU,
the flash / efficient / cuDNN kernels on CUDA, or the math decomposition where no fused kernel
applies).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from coil.fx_passes.patterns.matcher import pattern_pass
from coil.fx_passes.patterns.registry import PatternRegistry
from coil.fx_passes.patterns.rule import Match, Rule

__all__ = ["ATTENTION_RULES", "fuse_attention"]

Tensor = torch.Tensor


def _scores(q: Tensor, k: Tensor) -> Tensor:
    return torch.matmul(q, k.transpose(-2, -1))


def _p_div(q: Tensor, k: Tensor, v: Tensor, s: float) -> Tensor:
    return torch.matmul(torch.softmax(_scores(q, k) / s, dim=-1), v)


def _p_mul(q: Tensor, k: Tensor, v: Tensor, s: float) -> Tensor:
    return torch.matmul(torch.softmax(_scores(q, k) * s, dim=-1), v)


def _p_none(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    return torch.matmul(torch.softmax(_scores(q, k), dim=-1), v)


def _p_div_mask(q: Tensor, k: Tensor, v: Tensor, m: Tensor, s: float) -> Tensor:
    return torch.matmul(torch.softmax(_scores(q, k) / s + m, dim=-1), v)


def _p_mul_mask(q: Tensor, k: Tensor, v: Tensor, m: Tensor, s: float) -> Tensor:
    return torch.matmul(torch.softmax(_scores(q, k) * s + m, dim=-1), v)


def _p_none_mask(q: Tensor, k: Tensor, v: Tensor, m: Tensor) -> Tensor:
    return torch.matmul(torch.softmax(_scores(q, k) + m, dim=-1), v)


def _r_div(q: Tensor, k: Tensor, v: Tensor, s: float) -> Tensor:
    return F.scaled_dot_product_attention(q, k, v, scale=1.0 / s)


def _r_mul(q: Tensor, k: Tensor, v: Tensor, s: float) -> Tensor:
    return F.scaled_dot_product_attention(q, k, v, scale=s)


def _r_none(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    return F.scaled_dot_product_attention(q, k, v, scale=1.0)


def _r_div_mask(q: Tensor, k: Tensor, v: Tensor, m: Tensor, s: float) -> Tensor:
    return F.scaled_dot_product_attention(q, k, v, attn_mask=m, scale=1.0 / s)


def _r_mul_mask(q: Tensor, k: Tensor, v: Tensor, m: Tensor, s: float) -> Tensor:
    return F.scaled_dot_product_attention(q, k, v, attn_mask=m, scale=s)


def _r_none_mask(q: Tensor, k: Tensor, v: Tensor, m: Tensor) -> Tensor:
    return F.scaled_dot_product_attention(q, k, v, attn_mask=m, scale=1.0)


def _check(match: Match) -> bool:
    """q, k, v: 4-D, one floating dtype and device, q/k head dims equal, k/v lengths equal;
    a mask: same dtype, broadcastable to the scores; a scale: finite and non-zero."""
    q, k, v = (match.value(i) for i in range(3))
    if not all(isinstance(t, Tensor) and t.dim() == 4 for t in (q, k, v)):
        return False
    if not (q.dtype == k.dtype == v.dtype and q.dtype.is_floating_point):
        return False
    if not (q.device == k.device == v.device):
        return False
    if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2] or q.shape[0] != k.shape[0]:
        return False
    for extra in match.args[3:]:
        if isinstance(extra, (int, float)) and not (extra != 0 and math.isfinite(extra)):
            return False
    mask = (
        match.value(3)
        if len(match.args) > 3 and not isinstance(match.args[3], (int, float))
        else None
    )
    if mask is not None:
        if not isinstance(mask, Tensor) or mask.dtype != q.dtype or mask.dim() > 4:
            return False
        scores = (*q.shape[:-1], k.shape[-2])
        try:
            torch.broadcast_shapes(tuple(mask.shape), scores)  # type: ignore[no-untyped-call]
        except RuntimeError:
            return False
    return True


def _examples(mask: bool, scale: bool) -> Callable[[], tuple[object, ...]]:
    def make() -> tuple[object, ...]:
        q, k, v = (torch.randn(2, 4, 8, 16) for _ in range(3))
        args: list[object] = [q, k, v]
        if mask:
            args.append(torch.randn(2, 1, 8, 8))
        if scale:
            args.append(4.0)
        return tuple(args)

    return make


ATTENTION_RULES = PatternRegistry(
    [
        Rule("sdpa_div_mask", _p_div_mask, _r_div_mask, _examples(True, True), _check),
        Rule("sdpa_mul_mask", _p_mul_mask, _r_mul_mask, _examples(True, True), _check),
        Rule("sdpa_mask", _p_none_mask, _r_none_mask, _examples(True, False), _check),
        Rule("sdpa_div", _p_div, _r_div, _examples(False, True), _check),
        Rule("sdpa_mul", _p_mul, _r_mul, _examples(False, True), _check),
        Rule("sdpa", _p_none, _r_none, _examples(False, False), _check),
    ]
)

fuse_attention = pattern_pass(
    "fuse_attention",
    ATTENTION_RULES,
    doc="""Replace eager attention with scaled_dot_product_attention.

    Stage: post-grad (and joint). Rules: :data:`ATTENTION_RULES`.

    Args:
        gm: the graph module, edited in place.

    Returns:
        ``PassResult(gm, modified)``.

    Example::

        before: s = bmm(view(q), view(transpose(k))); w = softmax(s / 8.0 + mask); o = bmm(w, v)
        after:  o = getitem(_scaled_dot_product_flash_attention_for_cpu(q, k, v, attn_mask=mask,
                            scale=0.125), 0)

    Soundness: a match is exact at the graph's own shapes and strides (the pattern is re-traced
    there); intermediates used outside the pattern (e.g. attention weights saved for backward
    in a training graph) block the rewrite, so only forward-only graphs fuse. SDPA computes the
    same function up to floating-point reassociation (scale applied to q*k^T once).
    Dropout inside attention is not fused (see README: limits).
    """,
)
