"""coil's attention as two torch.library custom ops, registered when this module is imported.

    coil::attention(Tensor q, Tensor k, Tensor v, Tensor? bias, Tensor? keep, Tensor? alibi,
                    float scale, bool causal, SymInt window, float softcap)
        -> (Tensor out, Tensor lse)
    coil::attention_backward(Tensor grad_out, Tensor? grad_lse, Tensor q, Tensor k, Tensor v,
                             Tensor out, Tensor lse, Tensor? bias, Tensor? keep, Tensor? alibi,
                             float scale, bool causal, SymInt window, float softcap,
                             bool bias_grad)
        -> (Tensor dq, Tensor dk, Tensor dv, Tensor dbias)

The semantics (the contract with fx-passes and the lowering) are in the runtime README,
"Attention". `coil::attention` has a registered autograd formula: it calls
`coil::attention_backward`, whose `dbias` is the fp32 gradient of the scores at full
(B, H, Sq, Sk) when `bias_grad` (an empty (0,) tensor otherwise), reduced here to the bias's own
shape (summed over its broadcast dimensions) and cast to its dtype. The log-sum-exp output is
differentiable too (its gradient enters the backward as `grad_lse`). Both ops check their
arguments in the real and the fake implementation, with errors naming the op and the argument.

Importing this module imports torch (the registration needs it) but not Triton: the kernels are
imported on the first launch (`attention_launch`).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from coil.runtime import attention_launch
from torch import Tensor

__all__ = ["OPS", "attention", "attention_backward"]

_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_MAX_HEAD_DIM = 256

FORWARD_SCHEMA = (
    "(Tensor q, Tensor k, Tensor v, Tensor? bias, Tensor? keep, Tensor? alibi, float scale, "
    "bool causal, SymInt window, float softcap) -> (Tensor out, Tensor lse)"
)
BACKWARD_SCHEMA = (
    "(Tensor grad_out, Tensor? grad_lse, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, "
    "Tensor? bias, Tensor? keep, Tensor? alibi, float scale, bool causal, SymInt window, "
    "float softcap, bool bias_grad) -> (Tensor dq, Tensor dk, Tensor dv, Tensor dbias)"
)


def _fail(op: str, arg: str, message: str) -> None:
    raise ValueError(f"coil::{op}: argument '{arg}' {message}")


def _check_broadcast(op: str, arg: str, t: Tensor, full: tuple[Any, ...]) -> None:
    if t.dim() > 4:
        _fail(op, arg, f"must broadcast to (B, H, Sq, Sk) = {full}, got {t.dim()} dims")
    for size, want in zip(reversed(t.shape), reversed(full), strict=False):
        if size != 1 and size != want:
            _fail(op, arg, f"of shape {tuple(t.shape)} does not broadcast to (B, H, Sq, Sk) = "
                  f"{full}")


def check_args(op: str, q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None,
               keep: Tensor | None, alibi: Tensor | None, scale: float, window: Any,
               softcap: float) -> None:
    """Raise a ValueError naming `coil::<op>` and the argument unless the arguments fit the
    contract (runtime README, "Attention")."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4:
            _fail(op, name, f"must have 4 dims (B, heads, S, D), got shape {tuple(t.shape)}")
    if q.dtype not in _FLOATS:
        _fail(op, "q", f"must be float16, bfloat16, float32 or float64, got {q.dtype}")
    for name, t in (("k", k), ("v", v)):
        if t.dtype != q.dtype:
            _fail(op, name, f"must have q's dtype {q.dtype}, got {t.dtype}")
    devices = [(name, t) for name, t in (("k", k), ("v", v), ("bias", bias), ("keep", keep),
                                         ("alibi", alibi)) if t is not None]
    for name, t in devices:
        if t.device != q.device:
            _fail(op, name, f"must be on q's device {q.device}, got {t.device}")
    batch, heads, sq, d = q.shape
    if k.shape != v.shape:
        _fail(op, "v", f"must have k's shape {tuple(k.shape)}, got {tuple(v.shape)}")
    if k.shape[0] != batch or k.shape[3] != d:
        _fail(op, "k", f"of shape {tuple(k.shape)} must have q's batch {batch} and head size {d}")
    if k.shape[1] < 1 or heads % k.shape[1] != 0:
        _fail(op, "k", f"has {k.shape[1]} heads, which must divide q's {heads}")
    if d < 1 or d > _MAX_HEAD_DIM:
        _fail(op, "q", f"head size must be between 1 and {_MAX_HEAD_DIM}, got {d}")
    full = (batch, heads, sq, k.shape[2])
    if bias is not None:
        if not bias.dtype.is_floating_point:
            _fail(op, "bias", f"must be a floating tensor, got {bias.dtype}")
        _check_broadcast(op, "bias", bias, full)
    if keep is not None:
        if keep.dtype != torch.bool:
            _fail(op, "keep", f"must be a bool tensor, got {keep.dtype}")
        _check_broadcast(op, "keep", keep, full)
    if alibi is not None and (alibi.dtype != torch.float32 or tuple(alibi.shape) != (heads,)):
        _fail(op, "alibi", f"must be float32 of shape ({heads},), got {alibi.dtype} "
              f"{tuple(alibi.shape)}")
    if not math.isfinite(scale):
        _fail(op, "scale", f"must be finite, got {scale}")
    if window < 0:
        _fail(op, "window", f"must be >= 0 (0: no window), got {window}")
    if not softcap >= 0 or math.isinf(softcap):
        _fail(op, "softcap", f"must be finite and >= 0 (0: none), got {softcap}")


def _forward_impl(q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None, keep: Tensor | None,
                  alibi: Tensor | None, scale: float, causal: bool, window: int,
                  softcap: float) -> tuple[Tensor, Tensor]:
    check_args("attention", q, k, v, bias, keep, alibi, scale, window, softcap)
    return attention_launch.forward(q, k, v, bias, keep, alibi, scale, causal, window, softcap)


def _forward_fake(q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None, keep: Tensor | None,
                  alibi: Tensor | None, scale: float, causal: bool, window: Any,
                  softcap: float) -> tuple[Tensor, Tensor]:
    check_args("attention", q, k, v, bias, keep, alibi, scale, window, softcap)
    batch, heads, sq, d = q.shape
    return q.new_empty((batch, heads, sq, d)), q.new_empty((batch, heads, sq),
                                                           dtype=torch.float32)


def _check_backward(grad_out: Tensor, grad_lse: Tensor | None, q: Tensor, out: Tensor,
                    lse: Tensor) -> None:
    if grad_out.shape != q.shape or out.shape != q.shape:
        _fail("attention_backward", "grad_out", f"and 'out' must have q's shape "
              f"{tuple(q.shape)}, got {tuple(grad_out.shape)} and {tuple(out.shape)}")
    for name, t in (("lse", lse), ("grad_lse", grad_lse)):
        if t is not None and t.shape != q.shape[:3]:
            _fail("attention_backward", name, f"must have shape {tuple(q.shape[:3])}, got "
                  f"{tuple(t.shape)}")


def _backward_impl(grad_out: Tensor, grad_lse: Tensor | None, q: Tensor, k: Tensor, v: Tensor,
                   out: Tensor, lse: Tensor, bias: Tensor | None, keep: Tensor | None,
                   alibi: Tensor | None, scale: float, causal: bool, window: int,
                   softcap: float, bias_grad: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    check_args("attention_backward", q, k, v, bias, keep, alibi, scale, window, softcap)
    _check_backward(grad_out, grad_lse, q, out, lse)
    return attention_launch.backward(grad_out, grad_lse, q, k, v, out, lse, bias, keep, alibi,
                                     scale, causal, window, softcap, bias_grad and bias is not None)


def _backward_fake(grad_out: Tensor, grad_lse: Tensor | None, q: Tensor, k: Tensor, v: Tensor,
                   out: Tensor, lse: Tensor, bias: Tensor | None, keep: Tensor | None,
                   alibi: Tensor | None, scale: float, causal: bool, window: Any,
                   softcap: float, bias_grad: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    check_args("attention_backward", q, k, v, bias, keep, alibi, scale, window, softcap)
    _check_backward(grad_out, grad_lse, q, out, lse)
    batch, heads, sq, _ = q.shape
    full = (batch, heads, sq, k.shape[2])
    dbias = q.new_empty(full if bias_grad and bias is not None else (0,), dtype=torch.float32)
    return q.new_empty(q.shape), k.new_empty(k.shape), k.new_empty(k.shape), dbias


attention = torch.library.custom_op(
    "coil::attention", _forward_impl, mutates_args=(), schema=FORWARD_SCHEMA)
attention_backward = torch.library.custom_op(
    "coil::attention_backward", _backward_impl, mutates_args=(), schema=BACKWARD_SCHEMA)
attention.register_fake(_forward_fake)
attention_backward.register_fake(_backward_fake)


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor]) -> None:
    q, k, v, bias, keep, alibi, scale, causal, window, softcap = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse, bias, keep, alibi)
    ctx.scalars = (scale, causal, window, softcap)
    ctx.set_materialize_grads(False)


def _backward(ctx: Any, grad_out: Tensor | None, grad_lse: Tensor | None) -> tuple[Any, ...]:
    q, k, v, out, lse, bias, keep, alibi = ctx.saved_tensors
    if grad_out is None:
        grad_out = torch.zeros_like(out)
    bias_grad = bias is not None and bool(ctx.needs_input_grad[3])
    dq, dk, dv, ds = torch.ops.coil.attention_backward(
        grad_out, grad_lse, q, k, v, out, lse, bias, keep, alibi, *ctx.scalars, bias_grad)
    dbias = ds.sum_to_size(bias.shape).to(bias.dtype) if bias_grad else None
    return dq, dk, dv, dbias, None, None, None, None, None, None


attention.register_autograd(_backward, setup_context=_setup_context)

OPS: tuple[Any, ...] = (torch.ops.coil.attention.default, torch.ops.coil.attention_backward.default)
