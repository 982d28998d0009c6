"""Triton kernels of `coil::attention_backward`: the flash backward in three launches.

1. `attention_bwd_delta_kernel`: delta[b, h, i] = sum_d dO * O - dlse (the gradient reaching the
   log-sum-exp output, when there is one).
2. `attention_bwd_dq_kernel`: one program per (query block, batch, head) loops over key tiles as
   the forward does and accumulates dQ += dS K.
3. `attention_bwd_dkdv_kernel`: one program per (key tile, batch, key/value head) loops over the
   query heads of its group and their query tiles, recomputing p = exp(s - lse), and accumulates
   dV += p^T dO and dK += dS^T Q in registers: no atomics, deterministic. With BIAS_GRAD it also
   writes dS (fp32, natural units) at [b, h, i, j] of a zero-filled (B, H, Sq, Sk) buffer.

With a bias tensor a row's scores may all sit near the dtype's lowest value (a query whose every
visible key is padded in an HF additive mask); its fp32 lse = max + log(sum) then rounds to the
max, and exp(s - lse) would weigh each key 1 instead of 1/n. So under HAS_BIAS the dQ kernel
(launched first) also sums c = sum_j exp(s - lse) per row, divides dQ by it and writes 1/c; the
dK/dV kernel scales dO and delta by 1/c, which scales p, dP - delta and so dS and dV exactly as
dividing p would (1/c is 1 to rounding on every ordinary row).

dS = p * (dP - delta) with dP = dO V^T; under SOFTCAP it is multiplied by 1 - tanh^2 before it
reaches dQ and dK (dbias takes it before). Tiles are visited, trimmed and skipped as in the
forward (`attention_kernels` module docstring), the final log-sum-exp standing in for the
rows' maxima: it is known before the loops, so a bias-dead tile is trimmed only when it is dead
for sure and nothing runs afterwards.
"""

# mypy: disable-error-code="no-untyped-def,misc,untyped-decorator"
# ruff: noqa: SIM108  (compile-time switches read best as if/else blocks in kernels)

from __future__ import annotations

import triton
import triton.language as tl
from coil.runtime.attention_kernels import (
    LOG2E,
    ROW_LIVE,
    dot,
    exp_units,
    key_bounds,
    load2,
    load_bias,
    load_keep,
    scores,
    tanh,
    tile_dead,
    tile_live,
    trim_keys,
)

__all__ = [
    "attention_bwd_delta_kernel", "attention_bwd_dkdv_kernel", "attention_bwd_dq_kernel",
    "load_lse", "query_bounds", "trim_queries",
]


@triton.jit
def attention_bwd_delta_kernel(
    OUT, DO, DLSE, DELTA, sob, soh, som, sod, sdb, sdh, sdm, sdd, H, Sq,
    HEAD_DIM: tl.constexpr, D_PAD: tl.constexpr, BLOCK_M: tl.constexpr,
    D_MASKED: tl.constexpr, HAS_DLSE: tl.constexpr,
):
    """DELTA (contiguous fp32 (B, H, Sq)) = rowsum(dO * O) - DLSE. Grid (cdiv(Sq, BLOCK_M), B*H)."""
    pid_bh = tl.program_id(1)
    b = (pid_bh // H).to(tl.int64)
    h = (pid_bh % H).to(tl.int64)
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D_PAD)
    row_valid = offs_m < Sq
    d_valid = offs_d < HEAD_DIM
    o = load2(OUT + b * sob + h * soh + offs_m[:, None] * som + offs_d[None, :] * sod,
              row_valid, d_valid, True, D_MASKED)
    do = load2(DO + b * sdb + h * sdh + offs_m[:, None] * sdm + offs_d[None, :] * sdd,
               row_valid, d_valid, True, D_MASKED)
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)
    row = pid_bh.to(tl.int64) * Sq + offs_m
    if HAS_DLSE:
        delta -= tl.load(DLSE + row, mask=row_valid, other=0.0)
    tl.store(DELTA + row, delta, mask=row_valid)


@triton.jit
def load_lse(lse_ptr, offs_m, row_valid, NATURAL: tl.constexpr):
    """(lse, lse in the scores' units) of rows offs_m; a row with no visible key (lse -inf) and a
    row outside the sequence get +inf in the scores' units, so their weights are 0."""
    lse = tl.load(lse_ptr + offs_m, mask=row_valid, other=float("-inf"))
    if NATURAL:
        lse_u = lse
    else:
        lse_u = lse * LOG2E
    return lse, tl.where(lse == float("-inf"), float("inf"), lse_u)


@triton.jit
def query_bounds(n0, Sq, Sk, window, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 CAUSAL: tl.constexpr, WINDOW: tl.constexpr):
    """Query ranges for the key tile [n0, n0 + BLOCK_N): (lo, full_lo, full_hi, hi), as
    `key_bounds` with the roles of queries and keys exchanged."""
    lo = n0 * 0
    hi = lo + Sq
    full_lo = lo
    full_hi = (Sq // BLOCK_M) * BLOCK_M + lo
    if CAUSAL:
        lo = (n0 // BLOCK_M) * BLOCK_M  # rows i >= j >= n0
        full_lo = ((n0 + BLOCK_N - 1 + BLOCK_M - 1) // BLOCK_M) * BLOCK_M  # m0 >= last key
    if WINDOW:
        hi = tl.minimum(hi, n0 + BLOCK_N - 1 + window)  # rows i < j + window
        full_hi = tl.minimum(full_hi, ((n0 + window) // BLOCK_M) * BLOCK_M)  # m0 + BM <= n0 + window
    hi = tl.maximum(hi, lo)
    full_lo = tl.where(n0 + BLOCK_N <= Sk, full_lo, hi)  # a partial key tile is masked throughout
    full_lo = tl.minimum(tl.maximum(full_lo, lo), hi)
    full_hi = tl.maximum(tl.minimum(full_hi, hi), full_lo)
    return lo, full_lo, full_hi, hi


@triton.jit
def _settled(lse, row_valid):
    """Every valid row's log-sum-exp is >= ROW_LIVE (a scalar)."""
    return tl.min(tl.where(row_valid, lse, float("inf"))) >= ROW_LIVE


@triton.jit
def _query_tile_dead(m0, offs_n, col_valid, lse_ptr, bias_base, keep_base, sbm, sbn, kpm, kpn,
                     Sq, BLOCK_M: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_KEEP: tl.constexpr):
    offs_m = m0 + tl.arange(0, BLOCK_M)
    row_valid = offs_m < Sq
    valid = col_valid[:, None] & row_valid[None, :]
    lse = tl.load(lse_ptr + offs_m, mask=row_valid, other=float("-inf"))
    return tile_dead(bias_base, keep_base, offs_m[None, :], offs_n[:, None], sbm, sbn, kpm, kpn,
                     valid, _settled(lse, row_valid), HAS_BIAS, HAS_KEEP)


@triton.jit
def trim_queries(lo, hi, offs_n, col_valid, lse_ptr, bias_base, keep_base, sbm, sbn, kpm, kpn,
                 Sq, BLOCK_M: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_KEEP: tl.constexpr):
    """(start, end): the query tiles [lo, hi) less the dead ones at either end, for the keys
    offs_n (`trim_keys` with queries and keys exchanged; a bias-dead tile counts as dead only
    when its rows' log-sum-exps are all >= ROW_LIVE)."""
    start = lo
    go = start < hi
    while go:
        dead = _query_tile_dead(start, offs_n, col_valid, lse_ptr, bias_base, keep_base, sbm,
                                sbn, kpm, kpn, Sq, BLOCK_M, HAS_BIAS, HAS_KEEP)
        start = tl.where(dead, start + BLOCK_M, start)
        go = dead & (start < hi)
    last = lo + (tl.maximum(hi - 1 - lo, 0) // BLOCK_M) * BLOCK_M
    go = (last >= start) & (hi > lo)
    while go:
        dead = _query_tile_dead(last, offs_n, col_valid, lse_ptr, bias_base, keep_base, sbm,
                                sbn, kpm, kpn, Sq, BLOCK_M, HAS_BIAS, HAS_KEEP)
        last = tl.where(dead, last - BLOCK_M, last)
        go = dead & (last >= start)
    return start, tl.maximum(tl.minimum(hi, last + BLOCK_M), start)


@triton.jit
def _dkdv_step(
    dk, dv, k, v, qT, do, lse_u, delta, rn, ds_base, i2, j2, valid, bias, keep, alibi_h, Sk,
    window, qk_scale, cap2,
    HAS_BIAS: tl.constexpr, HAS_KEEP: tl.constexpr, HAS_ALIBI: tl.constexpr,
    SOFTCAP: tl.constexpr, CAUSAL: tl.constexpr, WINDOW: tl.constexpr, MASKED: tl.constexpr,
    BIAS_GRAD: tl.constexpr, IEEE: tl.constexpr,
):
    """One query tile's contribution to (dk, dv) of the program's key tile (transposed scores)."""
    qkT = dot(k, qT, IEEE)
    sT = scores(qkT, i2, j2, valid, bias, keep, alibi_h, window, qk_scale, cap2, k.dtype,
                HAS_BIAS, HAS_KEEP, HAS_ALIBI, SOFTCAP, CAUSAL, WINDOW, MASKED)
    pT = exp_units(sT - lse_u[None, :], HAS_BIAS)
    if HAS_BIAS:  # p = exp(s - lse) / c exactly, also where lse absorbed log(l) (docstring)
        do = (do.to(tl.float32) * rn[:, None]).to(do.dtype)
        delta = delta * rn
    dv += dot(pT.to(do.dtype), do, IEEE)
    dpT = dot(v, tl.trans(do), IEEE)
    dsT = pT * (dpT - delta[None, :])
    if BIAS_GRAD:
        tl.store(ds_base + i2 * Sk + j2, dsT, mask=valid)
    if SOFTCAP:
        t = tanh(qkT * qk_scale)
        dsT = dsT * (1.0 - t * t)
    dk += dot(dsT.to(qT.dtype), tl.trans(qT), IEEE)
    return dk, dv


@triton.jit
def _dkdv_tiles(
    dk, dv, k, v, lo, hi, offs_n, col_valid, q_base, do_base, lse_ptr, delta_ptr, rn_ptr,
    ds_base, bias_base, keep_base, alibi_h, sqm, sqd, sdm, sdd, sbm, sbn, kpm, kpn, Sq, Sk,
    window, qk_scale, cap2,
    HEAD_DIM: tl.constexpr, D_PAD: tl.constexpr, BLOCK_M: tl.constexpr, D_MASKED: tl.constexpr,
    HAS_BIAS: tl.constexpr, HAS_KEEP: tl.constexpr, SKIP_TILES: tl.constexpr,
    HAS_ALIBI: tl.constexpr, SOFTCAP: tl.constexpr, CAUSAL: tl.constexpr, WINDOW: tl.constexpr,
    MASKED: tl.constexpr, BIAS_GRAD: tl.constexpr, IEEE: tl.constexpr,
):
    """The query tiles [lo, hi) (step BLOCK_M) of one query head for the program's key tile."""
    j2 = offs_n[:, None]
    offs_d = tl.arange(0, D_PAD)
    d_valid = offs_d < HEAD_DIM
    for m0 in range(lo, hi, BLOCK_M):
        offs_m = m0 + tl.arange(0, BLOCK_M)
        row_valid = offs_m < Sq
        i2 = offs_m[None, :]
        valid = col_valid[:, None] & row_valid[None, :]
        bias = load_bias(bias_base, i2, j2, sbm, sbn, valid, HAS_BIAS)
        keep = load_keep(keep_base, i2, j2, kpm, kpn, valid, HAS_KEEP)
        lse, lse_u = load_lse(lse_ptr, offs_m, row_valid, HAS_BIAS)
        delta = tl.load(delta_ptr + offs_m, mask=row_valid, other=0.0)
        rn = delta
        if HAS_BIAS:
            rn = tl.load(rn_ptr + offs_m, mask=row_valid, other=0.0)
        qT = load2(q_base + offs_d[:, None] * sqd + offs_m[None, :] * sqm, d_valid, row_valid,
                   D_MASKED, MASKED)
        do = load2(do_base + offs_m[:, None] * sdm + offs_d[None, :] * sdd, row_valid, d_valid,
                   MASKED, D_MASKED)
        if SKIP_TILES:
            if tile_live(bias, keep, lse, row_valid, HAS_BIAS, HAS_KEEP):
                dk, dv = _dkdv_step(
                    dk, dv, k, v, qT, do, lse_u, delta, rn, ds_base, i2, j2, valid, bias, keep,
                    alibi_h, Sk, window, qk_scale, cap2, HAS_BIAS, HAS_KEEP, HAS_ALIBI, SOFTCAP,
                    CAUSAL, WINDOW, MASKED, BIAS_GRAD, IEEE)
        else:
            dk, dv = _dkdv_step(
                dk, dv, k, v, qT, do, lse_u, delta, rn, ds_base, i2, j2, valid, bias, keep,
                alibi_h, Sk, window, qk_scale, cap2, HAS_BIAS, HAS_KEEP, HAS_ALIBI, SOFTCAP,
                CAUSAL, WINDOW, MASKED, BIAS_GRAD, IEEE)
    return dk, dv


@triton.jit
def attention_bwd_dkdv_kernel(
    Q, K, V, BIAS, KEEP, ALIBI, DO, LSE, DELTA, DK, DV, DS, RN,
    sqb, sqh, sqm, sqd, skb, skh, skn, skd, svb, svh, svn, svd,
    sbb, sbh, sbm, sbn, kpb, kph, kpm, kpn, sdb, sdh, sdm, sdd,
    H, HKV, GROUP, Sq, Sk, window, qk_scale, cap2, scale,
    HEAD_DIM: tl.constexpr, D_PAD: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    D_MASKED: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_KEEP: tl.constexpr, TRIM: tl.constexpr,
    SKIP_TILES: tl.constexpr, HAS_ALIBI: tl.constexpr, SOFTCAP: tl.constexpr,
    CAUSAL: tl.constexpr, WINDOW: tl.constexpr, BIAS_GRAD: tl.constexpr, IEEE: tl.constexpr,
):
    """dK, dV (contiguous (B, HKV, Sk, HEAD_DIM)) of one key tile of one (batch, kv head).

    Grid: (cdiv(Sk, BLOCK_N), B * HKV). LSE, DELTA and RN (the dQ kernel's, read under
    HAS_BIAS) are contiguous fp32 (B, H, Sq); DS, written under BIAS_GRAD only, is contiguous
    fp32 (B, H, Sq, Sk) and zero where no tile writes.
    """
    pid_bk = tl.program_id(1)
    b = (pid_bk // HKV).to(tl.int64)
    hk = (pid_bk % HKV).to(tl.int64)
    n0 = tl.program_id(0) * BLOCK_N
    offs_n = n0 + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D_PAD)
    col_valid = offs_n < Sk
    d_valid = offs_d < HEAD_DIM
    k = load2(K + b * skb + hk * skh + offs_n[:, None] * skn + offs_d[None, :] * skd,
              col_valid, d_valid, True, D_MASKED)
    v = load2(V + b * svb + hk * svh + offs_n[:, None] * svn + offs_d[None, :] * svd,
              col_valid, d_valid, True, D_MASKED)
    dk = tl.zeros([BLOCK_N, D_PAD], tl.float32)
    dv = tl.zeros([BLOCK_N, D_PAD], tl.float32)
    lo, full_lo0, full_hi0, hi = query_bounds(n0, Sq, Sk, window, BLOCK_M, BLOCK_N, CAUSAL,
                                              WINDOW)
    for g in range(0, GROUP):
        h = hk * GROUP + g
        bh = b * H + h
        q_base = Q + b * sqb + h * sqh
        do_base = DO + b * sdb + h * sdh
        bias_base = BIAS + b * sbb + h * sbh
        keep_base = KEEP + b * kpb + h * kph
        lse_ptr = LSE + bh * Sq
        delta_ptr = DELTA + bh * Sq
        rn_ptr = RN + bh * Sq
        ds_base = DS + bh * Sq * Sk
        alibi_h = 0.0
        if HAS_ALIBI:
            alibi_h = tl.load(ALIBI + h)
        lo_t = lo
        hi_t = hi
        full_lo = full_lo0
        full_hi = full_hi0
        if TRIM:
            lo_t, hi_t = trim_queries(lo, hi, offs_n, col_valid, lse_ptr, bias_base, keep_base,
                                      sbm, sbn, kpm, kpn, Sq, BLOCK_M, HAS_BIAS, HAS_KEEP)
            full_lo = tl.minimum(tl.maximum(full_lo, lo_t), hi_t)
            full_hi = tl.maximum(tl.minimum(full_hi, hi_t), full_lo)
        dk, dv = _dkdv_tiles(
            dk, dv, k, v, lo_t, full_lo, offs_n, col_valid, q_base, do_base, lse_ptr, delta_ptr,
            rn_ptr, ds_base, bias_base, keep_base, alibi_h, sqm, sqd, sdm, sdd, sbm, sbn, kpm,
            kpn, Sq, Sk, window, qk_scale, cap2, HEAD_DIM, D_PAD, BLOCK_M, D_MASKED, HAS_BIAS,
            HAS_KEEP, SKIP_TILES, HAS_ALIBI, SOFTCAP, CAUSAL, WINDOW, True, BIAS_GRAD, IEEE)
        dk, dv = _dkdv_tiles(
            dk, dv, k, v, full_lo, full_hi, offs_n, col_valid, q_base, do_base, lse_ptr,
            delta_ptr, rn_ptr, ds_base, bias_base, keep_base, alibi_h, sqm, sqd, sdm, sdd, sbm,
            sbn, kpm, kpn, Sq, Sk, window, qk_scale, cap2, HEAD_DIM, D_PAD, BLOCK_M, D_MASKED,
            HAS_BIAS, HAS_KEEP, SKIP_TILES, HAS_ALIBI, SOFTCAP, CAUSAL, WINDOW, False, BIAS_GRAD,
            IEEE)
        dk, dv = _dkdv_tiles(
            dk, dv, k, v, full_hi, hi_t, offs_n, col_valid, q_base, do_base, lse_ptr, delta_ptr,
            rn_ptr, ds_base, bias_base, keep_base, alibi_h, sqm, sqd, sdm, sdd, sbm, sbn, kpm,
            kpn, Sq, Sk, window, qk_scale, cap2, HEAD_DIM, D_PAD, BLOCK_M, D_MASKED, HAS_BIAS,
            HAS_KEEP, SKIP_TILES, HAS_ALIBI, SOFTCAP, CAUSAL, WINDOW, True, BIAS_GRAD, IEEE)
    row = pid_bk.to(tl.int64) * Sk + offs_n
    out_mask = col_valid[:, None] & d_valid[None, :]
    out_offs = row[:, None] * HEAD_DIM + offs_d[None, :]
    tl.store(DK + out_offs, (dk * scale).to(DK.dtype.element_ty), mask=out_mask)
    tl.store(DV + out_offs, dv.to(DV.dtype.element_ty), mask=out_mask)


@triton.jit
def _dq_step(
    dq, c, q, do, kT, vT, lse_u, delta, i2, j2, valid, bias, keep, alibi_h, window, qk_scale,
    cap2,
    HAS_BIAS: tl.constexpr, HAS_KEEP: tl.constexpr, HAS_ALIBI: tl.constexpr,
    SOFTCAP: tl.constexpr, CAUSAL: tl.constexpr, WINDOW: tl.constexpr, MASKED: tl.constexpr,
    IEEE: tl.constexpr,
):
    """One key tile's contribution to dq (and, under HAS_BIAS, to the weights' row sums c) of the
    program's query block."""
    qk = dot(q, kT, IEEE)
    s = scores(qk, i2, j2, valid, bias, keep, alibi_h, window, qk_scale, cap2, q.dtype,
               HAS_BIAS, HAS_KEEP, HAS_ALIBI, SOFTCAP, CAUSAL, WINDOW, MASKED)
    p = exp_units(s - lse_u[:, None], HAS_BIAS)
    dp = dot(do, vT, IEEE)
    ds = p * (dp - delta[:, None])
    if HAS_BIAS:
        c += tl.sum(p, 1)
    if SOFTCAP:
        t = tanh(qk * qk_scale)
        ds = ds * (1.0 - t * t)
    dq += dot(ds.to(kT.dtype), tl.trans(kT), IEEE)
    return dq, c


@triton.jit
def _dq_tiles(
    dq, c, q, do, lse, lse_u, delta, lo, hi, offs_m, row_valid, k_base, v_base, bias_base,
    keep_base, alibi_h, skn, skd, svn, svd, sbm, sbn, kpm, kpn, Sk, window, qk_scale, cap2,
    HEAD_DIM: tl.constexpr, D_PAD: tl.constexpr, BLOCK_N: tl.constexpr, D_MASKED: tl.constexpr,
    HAS_BIAS: tl.constexpr, HAS_KEEP: tl.constexpr, SKIP_TILES: tl.constexpr,
    HAS_ALIBI: tl.constexpr, SOFTCAP: tl.constexpr, CAUSAL: tl.constexpr, WINDOW: tl.constexpr,
    MASKED: tl.constexpr, IEEE: tl.constexpr,
):
    """The key tiles [lo, hi) (step BLOCK_N) for the program's query block."""
    i2 = offs_m[:, None]
    offs_d = tl.arange(0, D_PAD)
    d_valid = offs_d < HEAD_DIM
    for n0 in range(lo, hi, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        col_valid = offs_n < Sk
        j2 = offs_n[None, :]
        valid = row_valid[:, None] & col_valid[None, :]
        bias = load_bias(bias_base, i2, j2, sbm, sbn, valid, HAS_BIAS)
        keep = load_keep(keep_base, i2, j2, kpm, kpn, valid, HAS_KEEP)
        kT = load2(k_base + offs_d[:, None] * skd + offs_n[None, :] * skn, d_valid, col_valid,
                   D_MASKED, MASKED)
        vT = load2(v_base + offs_d[:, None] * svd + offs_n[None, :] * svn, d_valid, col_valid,
                   D_MASKED, MASKED)
        if SKIP_TILES:
            if tile_live(bias, keep, lse, row_valid, HAS_BIAS, HAS_KEEP):
                dq, c = _dq_step(
                    dq, c, q, do, kT, vT, lse_u, delta, i2, j2, valid, bias, keep, alibi_h,
                    window, qk_scale, cap2, HAS_BIAS, HAS_KEEP, HAS_ALIBI, SOFTCAP, CAUSAL,
                    WINDOW, MASKED, IEEE)
        else:
            dq, c = _dq_step(
                dq, c, q, do, kT, vT, lse_u, delta, i2, j2, valid, bias, keep, alibi_h, window,
                qk_scale, cap2, HAS_BIAS, HAS_KEEP, HAS_ALIBI, SOFTCAP, CAUSAL, WINDOW, MASKED,
                IEEE)
    return dq, c


@triton.jit
def attention_bwd_dq_kernel(
    Q, K, V, BIAS, KEEP, ALIBI, DO, LSE, DELTA, DQ, RN,
    sqb, sqh, sqm, sqd, skb, skh, skn, skd, svb, svh, svn, svd,
    sbb, sbh, sbm, sbn, kpb, kph, kpm, kpn, sdb, sdh, sdm, sdd,
    H, GROUP, Sq, Sk, window, qk_scale, cap2, scale,
    HEAD_DIM: tl.constexpr, D_PAD: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    D_MASKED: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_KEEP: tl.constexpr, TRIM: tl.constexpr,
    SKIP_TILES: tl.constexpr, HAS_ALIBI: tl.constexpr, SOFTCAP: tl.constexpr,
    CAUSAL: tl.constexpr, WINDOW: tl.constexpr, IEEE: tl.constexpr,
):
    """dQ (contiguous (B, H, Sq, HEAD_DIM)) of one query block of one (batch, head).

    Grid: (cdiv(Sq, BLOCK_M), B * H), blocks last-first as in the forward. Under HAS_BIAS it
    also writes RN (contiguous fp32 (B, H, Sq)) = 1 / sum_j exp(s - lse), the correction the
    dK/dV kernel applies (module docstring), and applies it to dQ itself.
    """
    pid_m = tl.num_programs(0) - 1 - tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = (pid_bh // H).to(tl.int64)
    h = pid_bh % H
    hk = (h // GROUP).to(tl.int64)
    h = h.to(tl.int64)
    m0 = pid_m * BLOCK_M
    offs_m = m0 + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D_PAD)
    row_valid = offs_m < Sq
    d_valid = offs_d < HEAD_DIM
    q = load2(Q + b * sqb + h * sqh + offs_m[:, None] * sqm + offs_d[None, :] * sqd,
              row_valid, d_valid, True, D_MASKED)
    do = load2(DO + b * sdb + h * sdh + offs_m[:, None] * sdm + offs_d[None, :] * sdd,
               row_valid, d_valid, True, D_MASKED)
    row = pid_bh.to(tl.int64) * Sq
    lse, lse_u = load_lse(LSE + row, offs_m, row_valid, HAS_BIAS)
    delta = tl.load(DELTA + row + offs_m, mask=row_valid, other=0.0)
    k_base = K + b * skb + hk * skh
    v_base = V + b * svb + hk * svh
    bias_base = BIAS + b * sbb + h * sbh
    keep_base = KEEP + b * kpb + h * kph
    alibi_h = 0.0
    if HAS_ALIBI:
        alibi_h = tl.load(ALIBI + h)

    dq = tl.zeros([BLOCK_M, D_PAD], tl.float32)
    c = tl.zeros([BLOCK_M], tl.float32)
    lo, full_lo, full_hi, hi = key_bounds(m0, Sk, window, BLOCK_M, BLOCK_N, CAUSAL, WINDOW)
    if TRIM:
        lo, hi = trim_keys(lo, hi, offs_m, row_valid, bias_base, keep_base, sbm, sbn, kpm, kpn,
                           Sk, _settled(lse, row_valid), BLOCK_N, HAS_BIAS, HAS_KEEP)
        full_lo = tl.minimum(tl.maximum(full_lo, lo), hi)
        full_hi = tl.maximum(tl.minimum(full_hi, hi), full_lo)
    if WINDOW:
        dq, c = _dq_tiles(
            dq, c, q, do, lse, lse_u, delta, lo, full_lo, offs_m, row_valid, k_base, v_base,
            bias_base, keep_base, alibi_h, skn, skd, svn, svd, sbm, sbn, kpm, kpn, Sk, window,
            qk_scale, cap2, HEAD_DIM, D_PAD, BLOCK_N, D_MASKED, HAS_BIAS, HAS_KEEP, SKIP_TILES,
            HAS_ALIBI, SOFTCAP, CAUSAL, WINDOW, True, IEEE)
    dq, c = _dq_tiles(
        dq, c, q, do, lse, lse_u, delta, full_lo, full_hi, offs_m, row_valid, k_base, v_base,
        bias_base, keep_base, alibi_h, skn, skd, svn, svd, sbm, sbn, kpm, kpn, Sk, window,
        qk_scale, cap2, HEAD_DIM, D_PAD, BLOCK_N, D_MASKED, HAS_BIAS, HAS_KEEP, SKIP_TILES,
        HAS_ALIBI, SOFTCAP, CAUSAL, WINDOW, False, IEEE)
    dq, c = _dq_tiles(
        dq, c, q, do, lse, lse_u, delta, full_hi, hi, offs_m, row_valid, k_base, v_base,
        bias_base, keep_base, alibi_h, skn, skd, svn, svd, sbm, sbn, kpm, kpn, Sk, window,
        qk_scale, cap2, HEAD_DIM, D_PAD, BLOCK_N, D_MASKED, HAS_BIAS, HAS_KEEP, SKIP_TILES,
        HAS_ALIBI, SOFTCAP, CAUSAL, WINDOW, True, IEEE)
    out_rows = row + offs_m
    if HAS_BIAS:
        inv_c = tl.where(c > 0.0, 1.0 / tl.where(c > 0.0, c, 1.0), 0.0)
        dq = dq * inv_c[:, None]
        tl.store(RN + out_rows, inv_c, mask=row_valid)
    tl.store(DQ + out_rows[:, None] * HEAD_DIM + offs_d[None, :],
             (dq * scale).to(DQ.dtype.element_ty), mask=row_valid[:, None] & d_valid[None, :])
