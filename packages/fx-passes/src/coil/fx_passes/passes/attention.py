"""Attention fusion: eager attention (matmul, scale, mask, softmax, matmul) into SDPA.

The rules are data: :data:`ATTENTION_RULES` holds one rule per variant (scale by division, by
multiplication or none; with or without an additive mask) and form (as torch code traces, or
as a decomposition table leaves it: ``permute`` for kᵀ, softmax as amax/sub/exp/sum/div), each
a plain pattern function and its replacement by ``torch.nn.functional.scaled_dot_product_attention``. The replacement is
traced at the graph's own FakeTensors, so it becomes the ATen kernel that SDPA dispatches to
for that device and those inputs (``aten._scaled_dot_product_flash_attention_for_cpu`` on CPU,
the flash / efficient / cuDNN kernels on CUDA). Where SDPA would take its math path the chain
stays: that path is the same chain (with a ``_safe_softmax``), and coil fuses the chain itself.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from coil.fx_passes.patterns.matcher import pattern_pass
from coil.fx_passes.patterns.registry import PatternRegistry
from coil.fx_passes.patterns.rule import Match, Rule
from torch.fx import GraphModule

__all__ = ["ATTENTION_RULES", "fuse_attention"]

Tensor = torch.Tensor
aten = torch.ops.aten


_Softmax = Callable[[Tensor], Tensor]
_KeyT = Callable[[Tensor], Tensor]


def _transpose_k(k: Tensor) -> Tensor:
    return k.transpose(-2, -1)


def _permute_k(k: Tensor) -> Tensor:
    """kᵀ as a decomposition table writes it (``transpose`` -> ``permute``)."""
    dims = list(range(k.dim()))
    dims[-2], dims[-1] = dims[-1], dims[-2]
    return k.permute(dims)


def _softmax(x: Tensor) -> Tensor:
    return torch.softmax(x, dim=-1)


def _softmax_decomposed(x: Tensor) -> Tensor:
    """Softmax as ATen's decomposition of ``_softmax`` writes it (coil's table uses it)."""
    e = torch.exp(x - torch.amax(x, -1, keepdim=True))
    return e / torch.sum(e, -1, keepdim=True)


def _attention(
    q: Tensor, k: Tensor, v: Tensor, m: Tensor | None, s: float | None, how: str,
    key_t: _KeyT, softmax: _Softmax,
) -> Tensor:  # fmt: skip
    w = torch.matmul(q, key_t(k))
    if s is not None and how == "div":
        w = w / s
    elif s is not None and how == "mul":
        w = w * s
    if m is not None:
        w = w + m
    return torch.matmul(softmax(w), v)


def _sdpa(q: Tensor, k: Tensor, v: Tensor, m: Tensor | None, s: float | None, how: str) -> Tensor:
    scale = 1.0 if s is None else (1.0 / s if how == "div" else s)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=m, scale=scale)


def _functions(
    how: str, mask: bool, key_t: _KeyT, softmax: _Softmax
) -> tuple[Callable[..., Tensor], Callable[..., Tensor]]:
    """The pattern and replacement of one variant, with the arity make_fx traces at:
    ``(q, k, v[, mask][, scale])``."""
    if mask and how != "none":

        def p4s(q: Tensor, k: Tensor, v: Tensor, m: Tensor, s: float) -> Tensor:
            return _attention(q, k, v, m, s, how, key_t, softmax)

        def r4s(q: Tensor, k: Tensor, v: Tensor, m: Tensor, s: float) -> Tensor:
            return _sdpa(q, k, v, m, s, how)

        return p4s, r4s
    if mask:

        def p4(q: Tensor, k: Tensor, v: Tensor, m: Tensor) -> Tensor:
            return _attention(q, k, v, m, None, how, key_t, softmax)

        def r4(q: Tensor, k: Tensor, v: Tensor, m: Tensor) -> Tensor:
            return _sdpa(q, k, v, m, None, how)

        return p4, r4
    if how != "none":

        def p3s(q: Tensor, k: Tensor, v: Tensor, s: float) -> Tensor:
            return _attention(q, k, v, None, s, how, key_t, softmax)

        def r3s(q: Tensor, k: Tensor, v: Tensor, s: float) -> Tensor:
            return _sdpa(q, k, v, None, s, how)

        return p3s, r3s

    def p3(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        return _attention(q, k, v, None, None, how, key_t, softmax)

    def r3(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        return _sdpa(q, k, v, None, None, how)

    return p3, r3


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


def _fused_kernel(replacement: GraphModule) -> bool:
    """SDPA reached one of its fused kernels (flash, memory-efficient, cuDNN, the CPU's flash).
    Where it takes its math path instead, the replacement is the same chain as the pattern with
    a ``_safe_softmax`` no faster, so the graph keeps the chain coil fuses itself."""
    return any(n.op == "call_function" and getattr(n.target, "__name__", "").startswith("_scaled_dot_product_")
               and "_math" not in getattr(n.target, "__name__", "") for n in replacement.graph.nodes)


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


# (suffix, kᵀ form, softmax form): the graph as make_fx traces torch code, and as AOTAutograd
# leaves it after a decomposition table such as coil's (transpose -> permute, _softmax ->
# amax/sub/exp/sum/div: what HF GPT-2 and BERT eager attention become in coil's backend).
_FORMS: tuple[tuple[str, _KeyT, _Softmax, frozenset[object]], ...] = (
    ("", _transpose_k, _softmax, frozenset({aten.bmm.default, aten._softmax.default})),
    (
        "_decomposed", _permute_k, _softmax_decomposed,
        frozenset({aten.bmm.default, aten.amax.default, aten.exp.default, aten.permute.default}),
    ),
)  # fmt: skip
# (name, scale, mask): masked variants first (a mask rule never matches an unmasked graph, but
# keeping the order fixed keeps the pass deterministic).
_VARIANTS = (
    ("sdpa_div_mask", "div", True),
    ("sdpa_mul_mask", "mul", True),
    ("sdpa_mask", "none", True),
    ("sdpa_div", "div", False),
    ("sdpa_mul", "mul", False),
    ("sdpa", "none", False),
)


def _rules() -> list[Rule]:
    rules = []
    for suffix, key_t, softmax, needs in _FORMS:
        for name, how, mask in _VARIANTS:
            pattern, replacement = _functions(how, mask, key_t, softmax)
            examples = _examples(mask, how != "none")
            rules.append(Rule(name + suffix, pattern, replacement, examples, _check, needs, _fused_kernel))
    return rules


ATTENTION_RULES = PatternRegistry(_rules())
"""The 12 attention rules: 6 variants (scale by ``/``, ``*`` or none; with or without an
additive mask) in 2 forms (``sdpa_*``: ``transpose`` and ``_softmax`` as traced from torch;
``sdpa_*_decomposed``: ``permute`` and the amax/sub/exp/sum/div softmax a decomposition table
leaves, e.g. coil's backend on HF GPT-2/BERT eager attention)."""

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
