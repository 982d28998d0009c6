"""The attention suite of `coil bench` (group `attention`): attention as models write it, bf16.

Every case is a `KernelCase` (coil.bench.kernel_case): one of the forms below, `attn_<form>_fwd`
(the forward) or `attn_<form>_fwdbwd` (the forward and the gradients of q, k and v), q, k, v of
shape (B, H, S, D), standard normal. Each has its FlexAttention twin (coil.bench.attention_flex),
what the `flex` mode runs.

| form | what the function does | B H S D |
|---|---|---|
| padding_add | SDPA with a BERT-style additive (B, 1, S, S) mask, as HF builds it from the attention mask: 0 where a key counts, the dtype's lowest value where it is padding; key lengths drawn in S/2..S | 16 12 512 64 |
| padding_bool | the same padding as a bool (B, 1, S, S) mask (True: the key counts), forward only | 16 12 512 64 |
| unmasked | SDPA with no mask: the unmasked flash attention the padded forms are held to (their `reference_case`, limit 1) | 16 12 512 64 |
| relpos | a T5-style (1, H, S, S) relative position bias added to the scores in an eager chain: `softmax(q k^T / sqrt(D) + bias)` in fp32, then `@ v` | 16 12 512 64 |
| causal | SDPA with `is_causal=True` | 4 12 4096 64 |
| window | causal within a sliding window of W = 1024 keys: the bool mask built in the function from positions, then SDPA | 2 12 8192 64 |
| alibi | ALiBi: the bias `slope[h] * (j - i)` with -inf above the diagonal built in the function from the slopes (an fp32 input), then SDPA | 4 16 2048 64 |
| gqa | grouped-query causal attention, 32 query heads over 8 key/value heads widened with HF's `repeat_kv`, then SDPA | 4 32 2048 128 |

The masks and biases a model builds once per batch (padding masks, the relative position bias)
are inputs; those it builds from positions in its forward (the window, ALiBi) are built inside the
function, where a compiler may generate them in the attention kernel rather than read them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from coil.bench import attention_flex
from coil.bench.kernel_case import Args, Dims, KernelCase, randn

if TYPE_CHECKING:
    import torch

__all__ = ["ATTENTION", "WINDOW", "alibi", "alibi_slopes", "causal", "gqa", "padding_additive", "padding_bool",
           "relpos", "repeat_kv", "unmasked", "window"]

WINDOW = 1024


def padding_additive(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """SDPA under an additive float mask (0: the key counts; the dtype's lowest value: padding)."""
    import torch.nn.functional as F

    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def padding_bool(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """SDPA under a bool mask (True: the key counts)."""
    import torch.nn.functional as F

    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def unmasked(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """SDPA with no mask."""
    import torch.nn.functional as F

    return F.scaled_dot_product_attention(q, k, v)


def relpos(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """The eager chain of a model with a relative position bias: scores = q k^T / sqrt(D) + bias,
    softmax in fp32 (fp64 stays fp64), probabilities back in q's dtype, times v."""
    import torch

    scores = torch.matmul(q, k.transpose(-1, -2)) * q.shape[-1] ** -0.5 + bias
    wide = scores if scores.dtype == torch.float64 else scores.float()
    return torch.matmul(torch.softmax(wide, dim=-1).to(q.dtype), v)


def causal(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """SDPA, causal."""
    import torch.nn.functional as F

    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def window(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, w: int) -> torch.Tensor:
    """SDPA where query i sees keys j with i - w < j <= i, the bool mask built from positions."""
    import torch
    import torch.nn.functional as F

    pos = torch.arange(q.shape[-2], device=q.device)
    rel = pos[:, None] - pos[None, :]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=(rel >= 0) & (rel < w))


def alibi(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, slopes: torch.Tensor) -> torch.Tensor:
    """SDPA under ALiBi: the additive bias slopes[h] * (j - i), -inf where j > i (causal), built
    from the positions and the fp32 slopes, in q's dtype."""
    import torch
    import torch.nn.functional as F

    pos = torch.arange(q.shape[-2], device=q.device)
    rel = pos[None, :] - pos[:, None]
    bias = (slopes.to(torch.float64 if q.dtype == torch.float64 else torch.float32)[:, None, None] * rel)
    bias = bias.masked_fill(rel > 0, float("-inf")).to(q.dtype)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias[None])


def repeat_kv(x: torch.Tensor, n: int) -> torch.Tensor:
    """HF's repeat_kv: (B, H, S, D) to (B, H * n, S, D), each head repeated n times in a row."""
    b, h, s, d = x.shape
    return x[:, :, None, :, :].expand(b, h, n, s, d).reshape(b, h * n, s, d)


def gqa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal SDPA with k and v widened to q's heads by `repeat_kv`."""
    import torch.nn.functional as F

    n = q.shape[1] // k.shape[1]
    return F.scaled_dot_product_attention(q, repeat_kv(k, n), repeat_kv(v, n), is_causal=True)


def alibi_slopes(heads: int) -> list[float]:
    """ALiBi's head slopes for a power-of-two number of heads: 2^(-8 (h + 1) / heads)."""
    return [2.0 ** (-8.0 * (h + 1) / heads) for h in range(heads)]


def _qkv(d: Dims, device: str, dtype: Any) -> Args:
    kv = d.get("HKV", d["H"])
    return (randn((d["B"], d["H"], d["S"], d["D"]), device, dtype),
            randn((d["B"], kv, d["S"], d["D"]), device, dtype), randn((d["B"], kv, d["S"], d["D"]), device, dtype))


def _keep(d: Dims, device: str) -> torch.Tensor:
    """(B, 1, S, S) bool, True where the key counts: each row's length drawn in S/2..S."""
    import torch

    s = d["S"]
    lengths = torch.randint(s // 2, s + 1, (d["B"],))
    keep = torch.arange(s)[None, :] < lengths[:, None]
    return keep[:, None, None, :].expand(d["B"], 1, s, s).contiguous().to(device)


def _make_padding_additive(d: Dims, device: str, dtype: Any) -> Args:
    import torch

    keep = _keep(d, device)
    mask = torch.zeros(keep.shape, device=device, dtype=dtype).masked_fill(~keep, torch.finfo(dtype).min)
    return (*_qkv(d, device, dtype), mask)


def _make_padding_bool(d: Dims, device: str, dtype: Any) -> Args:
    return (*_qkv(d, device, dtype), _keep(d, device))


def _make_relpos(d: Dims, device: str, dtype: Any) -> Args:
    return (*_qkv(d, device, dtype), randn((1, d["H"], d["S"], d["S"]), device, dtype))


def _make_window(d: Dims, device: str, dtype: Any) -> Args:
    return (*_qkv(d, device, dtype), d["W"])


def _make_alibi(d: Dims, device: str, dtype: Any) -> Args:
    import torch

    return (*_qkv(d, device, dtype), torch.tensor(alibi_slopes(d["H"]), device=device, dtype=torch.float32))


def _flops_fwd(d: Dims) -> float:
    """Dense-equivalent forward FLOPs: q k^T and p v over every score."""
    return 4.0 * d["B"] * d["H"] * d["S"] * d["S"] * d["D"]


def _flops_fwdbwd(d: Dims) -> float:
    """Dense-equivalent forward and backward FLOPs (the backward's five matmuls: 2.5 x the forward's two)."""
    return 3.5 * _flops_fwd(d)


_ENCODER = {"B": 16, "H": 12, "S": 512, "D": 64}
_SMALL = {"B": 2, "H": 2, "S": 24, "D": 8}


def _cases(form: str, fn: Callable[..., Any], make: Callable[[Dims, str, Any], Args],
           flex: Callable[[Args], Any], dims: Dims, small: Dims, batched: tuple[int, ...], *,
           fwdbwd: bool = True, reference: str | None = None) -> tuple[KernelCase, ...]:
    """The `attn_<form>_fwd` case and, when `fwdbwd`, `attn_<form>_fwdbwd`; `reference` names the
    form whose case of the same kind bounds them."""
    shape = " ".join(f"{k}={v}" for k, v in dims.items())
    out = []
    for kind, grad, flops in (("fwd", (), _flops_fwd), ("fwdbwd", (0, 1, 2), _flops_fwdbwd))[:2 if fwdbwd else 1]:
        ref = f"attn_{reference}_{kind}" if reference else None
        out.append(KernelCase(f"attn_{form}_{kind}", "attention", f"{form} {kind}, {shape}", fn, make, dims, small,
                              flops, grad=grad, batched=batched, flex=flex, reference_case=ref))
    return tuple(out)


ATTENTION: tuple[KernelCase, ...] = (
    *_cases("padding_add", padding_additive, _make_padding_additive, attention_flex.padding_additive, _ENCODER,
            _SMALL, (0, 1, 2, 3), reference="unmasked"),
    *_cases("padding_bool", padding_bool, _make_padding_bool, attention_flex.padding_bool, _ENCODER, _SMALL,
            (0, 1, 2, 3), fwdbwd=False, reference="unmasked"),
    *_cases("unmasked", unmasked, _qkv, attention_flex.unmasked, _ENCODER, _SMALL, (0, 1, 2)),
    *_cases("relpos", relpos, _make_relpos, attention_flex.relpos, _ENCODER, _SMALL, (0, 1, 2)),
    *_cases("causal", causal, _qkv, attention_flex.causal, {"B": 4, "H": 12, "S": 4096, "D": 64}, _SMALL, (0, 1, 2)),
    *_cases("window", window, _make_window, attention_flex.window, {"B": 2, "H": 12, "S": 8192, "D": 64, "W": WINDOW},
            {**_SMALL, "S": 40, "W": 9}, (0, 1, 2)),
    *_cases("alibi", alibi, _make_alibi, attention_flex.alibi, {"B": 4, "H": 16, "S": 2048, "D": 64},
            {**_SMALL, "H": 4}, (0, 1, 2)),
    *_cases("gqa", gqa, _qkv, attention_flex.gqa, {"B": 4, "H": 32, "HKV": 8, "S": 2048, "D": 128},
            {**_SMALL, "H": 4, "HKV": 2}, (0, 1, 2)),
)
