"""The attention suite's cases written with FlexAttention: the `flex` mode's functions.

For each SDPA form of coil.bench.attention, `<form>(args)` takes that case's arguments and returns
the same computation written as a user of `torch.nn.attention.flex_attention` writes it, and its
arguments: the same q, k, v tensors, the case's other tensors (a bias, ALiBi slopes) read by a
`score_mod` defined inside the function, and a `BlockMask` made here with `create_block_mask` from
a `mask_mod` (once, outside the timed call, as a model builds its mask once per batch). The
bench's `flex` mode compiles the returned function with Inductor (`torch.compile`), which turns
`flex_attention` into its generated Triton kernels; run uncompiled (the CPU tests), it computes
the same values with torch's unfused reference.

FlexAttention's default scale is the SDPA one, 1 / sqrt(D), applied before `score_mod`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = ["alibi", "causal", "gqa", "padding_additive", "padding_bool", "relpos", "unmasked", "window"]

Flex = tuple[Callable[..., Any], tuple[Any, ...]]


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_mask: Any) -> torch.Tensor:
    """flex_attention under a block mask (its mask_mod decides which scores count)."""
    from torch.nn.attention.flex_attention import flex_attention

    return flex_attention(q, k, v, block_mask=block_mask)  # type: ignore[return-value]


def _gqa_attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_mask: Any) -> torch.Tensor:
    """flex_attention with fewer key/value heads than query heads, each shared by a group."""
    from torch.nn.attention.flex_attention import flex_attention

    return flex_attention(q, k, v, block_mask=block_mask, enable_gqa=True)  # type: ignore[return-value]


def _plain(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """flex_attention with no mask and no score_mod."""
    from torch.nn.attention.flex_attention import flex_attention

    return flex_attention(q, k, v)  # type: ignore[return-value]


def _relpos_attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """flex_attention whose score_mod adds a (1, H, S, S) relative position bias."""
    from torch.nn.attention.flex_attention import flex_attention

    def score_mod(score: torch.Tensor, b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor,
                  kv_idx: torch.Tensor) -> torch.Tensor:
        return score + bias[0, h, q_idx, kv_idx]

    return flex_attention(q, k, v, score_mod=score_mod)  # type: ignore[return-value]


def _alibi_attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, slopes: torch.Tensor,
                  block_mask: Any) -> torch.Tensor:
    """flex_attention whose score_mod adds ALiBi's slope x (key - query position), under a causal block mask."""
    from torch.nn.attention.flex_attention import flex_attention

    def score_mod(score: torch.Tensor, b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor,
                  kv_idx: torch.Tensor) -> torch.Tensor:
        return score + slopes[h] * (kv_idx - q_idx)

    return flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask)  # type: ignore[return-value]


def _block_mask(mask_mod: Callable[..., Any], batch: int | None, q: torch.Tensor) -> Any:
    from torch.nn.attention.flex_attention import create_block_mask

    s = q.shape[-2]
    return create_block_mask(mask_mod, batch, None, s, s, device=str(q.device))


def _causal_mod(b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor, kv_idx: torch.Tensor) -> torch.Tensor:
    return q_idx >= kv_idx


def _keys_mask(keep: torch.Tensor, q: torch.Tensor) -> Any:
    """The block mask that keeps, in batch row b, the keys where keep[b] (a (B, S) bool)."""
    def mask_mod(b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor, kv_idx: torch.Tensor) -> torch.Tensor:
        return keep[b, kv_idx]

    return _block_mask(mask_mod, keep.shape[0], q)


def padding_additive(args: tuple[Any, ...]) -> Flex:
    """Padding from an additive (B, 1, S, S) mask (0 where a key counts): the keys it keeps as a block mask."""
    q, k, v, mask = args
    return _attend, (q, k, v, _keys_mask(mask[:, 0, 0, :] == 0, q))


def padding_bool(args: tuple[Any, ...]) -> Flex:
    """Padding from a bool (B, 1, S, S) mask (True where a key counts) as a block mask."""
    q, k, v, mask = args
    return _attend, (q, k, v, _keys_mask(mask[:, 0, 0, :], q))


def unmasked(args: tuple[Any, ...]) -> Flex:
    """Attention with no mask."""
    return _plain, tuple(args)


def relpos(args: tuple[Any, ...]) -> Flex:
    """A relative position bias as a score_mod."""
    return _relpos_attend, tuple(args)


def causal(args: tuple[Any, ...]) -> Flex:
    """Causal attention as a block mask."""
    q, k, v = args
    return _attend, (q, k, v, _block_mask(_causal_mod, None, q))


def window(args: tuple[Any, ...]) -> Flex:
    """Causal attention within a sliding window of `w` keys (the case's int argument) as a block mask."""
    q, k, v, w = args

    def mask_mod(b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor, kv_idx: torch.Tensor) -> torch.Tensor:
        keep: torch.Tensor = (q_idx >= kv_idx) & (q_idx - kv_idx < w)
        return keep

    return _attend, (q, k, v, _block_mask(mask_mod, None, q))


def alibi(args: tuple[Any, ...]) -> Flex:
    """ALiBi as a score_mod under a causal block mask."""
    q, k, v, slopes = args
    return _alibi_attend, (q, k, v, slopes, _block_mask(_causal_mod, None, q))


def gqa(args: tuple[Any, ...]) -> Flex:
    """Grouped-query causal attention: flex_attention's enable_gqa in place of repeat_kv."""
    q, k, v = args
    return _gqa_attend, (q, k, v, _block_mask(_causal_mod, None, q))
