"""Launching coil's attention kernels on given tensors: the implementations behind the two ops.

`forward` and `backward` take the ops' arguments (already checked by `coil.runtime.attention`)
and an optional launch configuration (the bench passes each candidate; otherwise the rule of
`attention_config` decides). On the CPU, or with TRITON_INTERPRET set, the same kernels run under
Triton's interpreter (`interpreter.interpreted_run`); fp64 inputs take the reference math of
`attention_reference` instead (Triton has no fp64 tensor-core dot worth having, and the
interpreter's would only be slower). Triton is imported on the first launch, not before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from coil.runtime import attention_reference
from coil.runtime.attention_config import (
    AttentionVariant,
    BackwardConfig,
    TileConfig,
    backward_config,
    forward_config,
)
from coil.runtime.interpreter import interpreted_run, interpreter_enabled
from torch import Tensor

__all__ = ["backward", "forward"]

_LOG2E = 1.4426950408889634


@dataclass(frozen=True)
class _Problem:
    """Sizes, the broadcast score-modifier tensors and the kernels' shared arguments."""

    batch: int
    heads: int
    kv_heads: int
    sq: int
    sk: int
    d: int
    interpreted: bool
    variant: AttentionVariant
    mod_args: tuple[Any, ...]  # BIAS, KEEP, ALIBI pointers
    mod_strides: tuple[int, ...]  # bias (b, h, i, j) then keep (b, h, i, j) strides
    scalars: tuple[Any, ...]  # window, qk_scale, cap2
    constexprs: dict[str, Any]


def _strides4(t: Tensor) -> tuple[int, ...]:
    return tuple(int(s) for s in t.stride())


def _problem(q: Tensor, k: Tensor, bias: Tensor | None, keep: Tensor | None,
             alibi: Tensor | None, scale: float, causal: bool, window: int, softcap: float,
             bias_grad: bool = False) -> _Problem:
    batch, heads, sq, d = (int(s) for s in q.shape)
    kv_heads, sk = int(k.shape[1]), int(k.shape[2])
    full = (batch, heads, sq, sk)
    bias4 = bias.expand(full) if bias is not None else q
    keep4 = keep.expand(full).view(torch.uint8) if keep is not None else q
    strides = (_strides4(bias4) if bias is not None else (0,) * 4) + (
        _strides4(keep4) if keep is not None else (0,) * 4)
    d_pad = max(16, 1 << (d - 1).bit_length())
    unit = 1.0 if bias is not None else _LOG2E  # the kernels' score units (attention_kernels)
    if softcap > 0:
        qk_scale, cap2 = scale / softcap, softcap * unit
    else:
        qk_scale, cap2 = scale * unit, 0.0
    interpreted = interpreter_enabled(q.device)
    # the kernels' `dot` mode: 1 tf32x3 (fp32 unless TF32 is allowed), 2 bf16 operands widened
    # (the interpreter's bf16 dot is wrong), 0 the default
    ieee = 2 if interpreted and q.dtype == torch.bfloat16 else int(
        q.dtype == torch.float32 and not torch.backends.cuda.matmul.allow_tf32)
    variant = AttentionVariant(bias is not None, keep is not None, bias_grad, causal, window > 0)
    constexprs = {
        "HEAD_DIM": d, "D_PAD": d_pad, "D_MASKED": d != d_pad,
        "HAS_BIAS": bias is not None, "HAS_KEEP": keep is not None,
        "TRIM": bias is not None or keep is not None, "SKIP_TILES": False,
        "HAS_ALIBI": alibi is not None,
        "SOFTCAP": softcap > 0, "CAUSAL": bool(causal), "WINDOW": window > 0, "IEEE": ieee,
    }
    return _Problem(
        batch, heads, kv_heads, sq, sk, d, interpreted, variant,
        (bias4, keep4, alibi if alibi is not None else q), strides,
        (int(window), float(qk_scale), float(cap2)), constexprs,
    )


_interpreted_runs: dict[int, Any] = {}


def _launch(fn: Any, grid: tuple[int, int], device: torch.device, interpreted: bool,
            config: TileConfig | None, args: tuple[Any, ...], constexprs: dict[str, Any]) -> None:
    options: dict[str, Any] = dict(constexprs)
    if config is not None:
        options.update(num_warps=config.num_warps, num_stages=config.num_stages)
        if constexprs.get("HAS_KEEP") and not interpreted:
            # Triton 3.6's software pipeliner turns the keep mask's byte loads into cp.async
            # copies narrower than their 4-byte minimum and fails to compile: no pipelining
            options["num_stages"] = 1
    if interpreted:
        run = _interpreted_runs.get(id(fn))
        if run is None:
            run = _interpreted_runs[id(fn)] = interpreted_run(fn)
        run(*args, grid=grid, warmup=False, **options)
        return
    with torch.cuda.device(device):
        fn.run(*args, grid=grid, warmup=False, **options)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def forward(q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None, keep: Tensor | None,
            alibi: Tensor | None, scale: float, causal: bool, window: int, softcap: float,
            config: TileConfig | None = None, skip_tiles: bool = False) -> tuple[Tensor, Tensor]:
    """(out, lse) of `coil::attention` (contract in the runtime README). `config` replaces the
    rule's tiles; `skip_tiles` also skips dead tiles inside the key range (attention_kernels)."""
    if q.dtype == torch.float64:
        return attention_reference.forward(q, k, v, bias, keep, alibi, scale, causal, window,
                                           softcap)
    p = _problem(q, k, bias, keep, alibi, scale, causal, window, softcap)
    out = torch.empty((p.batch, p.heads, p.sq, p.d), dtype=q.dtype, device=q.device)
    lse = torch.empty((p.batch, p.heads, p.sq), dtype=torch.float32, device=q.device)
    if out.numel() == 0 or p.sk == 0:
        out.zero_()
        lse.fill_(float("-inf"))
        return out, lse
    cfg = config or forward_config(p.d, p.sq, p.sk, q.dtype, p.variant, p.interpreted)
    from coil.runtime.attention_kernels import attention_fwd_kernel

    args = (
        q, k, v, *p.mod_args, out, lse, *_strides4(q), *_strides4(k), *_strides4(v),
        *p.mod_strides, p.heads, p.heads // p.kv_heads, p.sq, p.sk, *p.scalars,
    )
    constexprs = {**p.constexprs, "BLOCK_M": cfg.block_m, "BLOCK_N": cfg.block_n,
                  "SKIP_TILES": skip_tiles and bool(p.constexprs["TRIM"])}
    grid = (_cdiv(p.sq, cfg.block_m), p.batch * p.heads)
    _launch(attention_fwd_kernel, grid, q.device, p.interpreted, cfg, args, constexprs)
    return out, lse


def backward(grad_out: Tensor, grad_lse: Tensor | None, q: Tensor, k: Tensor, v: Tensor,
             out: Tensor, lse: Tensor, bias: Tensor | None, keep: Tensor | None,
             alibi: Tensor | None, scale: float, causal: bool, window: int, softcap: float,
             bias_grad: bool, config: BackwardConfig | None = None, skip_tiles: bool = False,
             ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(dq, dk, dv, ds) of `coil::attention_backward`: ds is the fp32 (B, H, Sq, Sk) gradient
    of the scores when `bias_grad` (zero where a key is masked), else an empty (0,) tensor.
    `config` and `skip_tiles` as in `forward`."""
    if grad_out.dtype != q.dtype:
        grad_out = grad_out.to(q.dtype)
    if q.dtype == torch.float64:
        return attention_reference.backward(grad_out, grad_lse, q, k, v, out, lse, bias, keep,
                                            alibi, scale, causal, window, softcap, bias_grad)
    p = _problem(q, k, bias, keep, alibi, scale, causal, window, softcap, bias_grad)
    dev = q.device
    dq = torch.empty((p.batch, p.heads, p.sq, p.d), dtype=q.dtype, device=dev)
    dk = torch.empty((p.batch, p.kv_heads, p.sk, p.d), dtype=q.dtype, device=dev)
    dv = torch.empty_like(dk)
    full = (p.batch, p.heads, p.sq, p.sk)
    ds = torch.zeros(full if bias_grad else (0,), dtype=torch.float32, device=dev)
    if dq.numel() == 0 or dk.numel() == 0:  # no query or no key: every gradient is 0
        return dq.zero_(), dk.zero_(), dv.zero_(), ds
    cfg = config or backward_config(p.d, p.sq, p.sk, q.dtype, p.variant, p.interpreted)
    from coil.runtime.attention_bwd_kernels import (
        attention_bwd_delta_kernel,
        attention_bwd_dkdv_kernel,
        attention_bwd_dq_kernel,
    )

    d_consts = {k_: p.constexprs[k_] for k_ in ("HEAD_DIM", "D_PAD", "D_MASKED")}
    delta = torch.empty((p.batch, p.heads, p.sq), dtype=torch.float32, device=dev)
    dlse = grad_lse.to(torch.float32).contiguous() if grad_lse is not None else delta
    rows = 64 if p.interpreted else 128
    _launch(attention_bwd_delta_kernel, (_cdiv(p.sq, rows), p.batch * p.heads), dev,
            p.interpreted, None,
            (out, grad_out, dlse, delta, *_strides4(out), *_strides4(grad_out), p.heads, p.sq),
            {**d_consts, "BLOCK_M": rows, "HAS_DLSE": grad_lse is not None})
    lse = lse.contiguous()
    tensors = (q, k, v, *p.mod_args, grad_out, lse, delta)
    strides = (*_strides4(q), *_strides4(k), *_strides4(v), *p.mod_strides,
               *_strides4(grad_out))
    group = p.heads // p.kv_heads
    window_, qk_scale, cap2 = p.scalars
    consts = {**p.constexprs, "SKIP_TILES": skip_tiles and bool(p.constexprs["TRIM"])}
    # 1 / sum_j p of each row, written by the dQ kernel under a bias (attention_bwd_kernels)
    rn = torch.empty_like(delta) if bias is not None else delta
    _launch(attention_bwd_dq_kernel, (_cdiv(p.sq, cfg.dq.block_m), p.batch * p.heads), dev,
            p.interpreted, cfg.dq,
            (*tensors, dq, rn, *strides, p.heads, group, p.sq, p.sk, window_, qk_scale, cap2,
             float(scale)),
            {**consts, "BLOCK_M": cfg.dq.block_m, "BLOCK_N": cfg.dq.block_n})
    _launch(attention_bwd_dkdv_kernel, (_cdiv(p.sk, cfg.dkdv.block_n), p.batch * p.kv_heads),
            dev, p.interpreted, cfg.dkdv,
            (*tensors, dk, dv, ds if bias_grad else delta, rn, *strides, p.heads, p.kv_heads,
             group, p.sq, p.sk, window_, qk_scale, cap2, float(scale)),
            {**consts, "BLOCK_M": cfg.dkdv.block_m, "BLOCK_N": cfg.dkdv.block_n,
             "BIAS_GRAD": bias_grad})
    return dq, dk, dv, ds

