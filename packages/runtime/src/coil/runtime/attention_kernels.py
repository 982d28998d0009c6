"""Triton kernels of `coil::attention`: the forward kernel and the tile helpers the backward shares.

The softmax runs on `exp2`. Without a bias tensor the scores are kept in base-2 units (natural
score times log2(e), folded into the scale); with one they stay in natural units and differences
are scaled on the way into `exp2`, because a bias may hold the dtype's lowest value (HF's padding
masks), which times log2(e) would overflow to -inf and turn a row whose every key carries it
(uniform weights, as in the contract) into an empty one. The log-sum-exp is stored in natural
units. Every score modification is a `tl.constexpr` switch, so a variant compiles to the
operations it uses only:

    s = qk * scale                        (fp32 accumulation of q . k)
    SOFTCAP:   s = softcap * tanh(s / softcap)
    HAS_ALIBI: s += round_to(q.dtype, alibi[h] * (j - i))
    HAS_BIAS:  s += bias[b, h, i, j]
    masked to -inf where HAS_KEEP and not keep[b, h, i, j], CAUSAL and j > i, WINDOW and
    j <= i - window, and outside the sequences.

Which key tiles run (the same rules in the backward, queries and keys exchanged for dK/dV):
- Tiles a query block cannot see under CAUSAL/WINDOW are never visited (`key_bounds`); tiles
  wholly inside the allowed region skip the element masks (`MASKED=False`).
- A tile is dead when its keep mask is empty, or when its bias is at most `BIAS_SKIP` everywhere
  and every row of the block has a maximum score (the log-sum-exp in the backward) of at least
  `ROW_LIVE`: its weights are then exp(<= -1e29) = 0 in fp32 for any score below 1e29 in
  magnitude, so it contributes exactly nothing, whatever order the tiles run in.
- TRIM: dead tiles at either end of the range are found by loading only their mask or bias
  tiles (`trim_keys`) and never run; the loop over the rest keeps no branch, so its loads stay
  in the software pipeline. That covers padding (left or right), block-diagonal (packed
  document) masks and causal masks given as tensors. The forward cannot know the rows' maxima
  beforehand: it trims bias-dead tiles, and runs them after all (masked) when some row's
  maximum ended below ROW_LIVE (a row whose every visible key carries the dtype's lowest
  value: uniform weights, as the contract's fp32 sums give).
- SKIP_TILES (off by default; the bench compares): dead tiles inside the range are skipped too,
  by a branch around each tile's products (the loads stay before it, in the pipeline).
"""

# mypy: disable-error-code="no-untyped-def,misc,untyped-decorator"
# compile-time switches (upper-case constexprs) read best as plain if/else blocks and comparisons
# ruff: noqa: SIM102, SIM108, SIM300

from __future__ import annotations

import triton
import triton.language as tl

__all__ = [
    "BIAS_SKIP", "LN2", "LOG2E", "ROW_LIVE", "attention_fwd_kernel", "dot", "exp_units",
    "key_bounds", "load2", "load_bias", "load_keep", "round_to", "scores", "tanh", "tile_dead",
    "tile_live", "trim_keys",
]

LOG2E = tl.constexpr(1.4426950408889634)
LN2 = tl.constexpr(0.6931471805599453)
BIAS_SKIP = tl.constexpr(-1e30)  # a bias at most this everywhere in a tile: the tile is dead ...
ROW_LIVE = tl.constexpr(-1e20)  # ... when every row's maximum is at least this


@triton.jit
def tanh(x):
    """tanh through exp (one formula for the compiler and the interpreter)."""
    e = tl.exp(-2.0 * tl.abs(x))
    t = (1.0 - e) / (1.0 + e)
    return tl.where(x < 0, -t, t)


@triton.jit
def round_to(x, ELEM_TY: tl.constexpr):
    """fp32 `x` rounded to ELEM_TY (to nearest, ties to even), as fp32. bf16 by its bits: the
    interpreter's fp32 -> bf16 cast truncates, and its round-to-nearest drops the carry."""
    if ELEM_TY == tl.bfloat16:
        bits = x.to(tl.uint32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        r = bits.to(tl.float32, bitcast=True)
    else:
        r = x.to(ELEM_TY).to(tl.float32)
    return r


@triton.jit
def dot(a, b, IEEE: tl.constexpr):
    """a @ b in fp32. IEEE = 1 (fp32 inputs): three TF32 products (tf32x3), about fp32's
    accuracy on tensor cores, where Triton's default would round the inputs to TF32;
    IEEE = 2: operands widened to fp32 first (Triton's interpreter multiplies bf16 operands as
    their raw bits)."""
    if IEEE == 1:
        r = tl.dot(a, b, input_precision="tf32x3")
    elif IEEE == 2:
        r = tl.dot(a.to(tl.float32), b.to(tl.float32))
    else:
        r = tl.dot(a, b)
    return r


@triton.jit
def load2(ptrs, rmask, cmask, MASK_R: tl.constexpr, MASK_C: tl.constexpr):
    """A 2-D tile; rows/columns outside `rmask`/`cmask` read 0 (only the masks switched on)."""
    if MASK_R:
        if MASK_C:
            x = tl.load(ptrs, mask=rmask[:, None] & cmask[None, :], other=0.0)
        else:
            x = tl.load(ptrs, mask=rmask[:, None], other=0.0)
    else:
        if MASK_C:
            x = tl.load(ptrs, mask=cmask[None, :], other=0.0)
        else:
            x = tl.load(ptrs)
    return x


@triton.jit
def load_bias(base, i2, j2, sbm, sbn, valid, HAS_BIAS: tl.constexpr):
    """The bias tile at query rows i2, key columns j2 as fp32 (-inf outside `valid`)."""
    if HAS_BIAS:
        bias = tl.load(base + i2 * sbm + j2 * sbn, mask=valid, other=float("-inf")).to(tl.float32)
    else:
        bias = tl.zeros([1, 1], tl.float32)
    return bias


@triton.jit
def load_keep(base, i2, j2, kpm, kpn, valid, HAS_KEEP: tl.constexpr):
    """The keep tile (bytes of a bool mask) as a boolean tile (False outside `valid`)."""
    if HAS_KEEP:
        keep = tl.load(base + i2 * kpm + j2 * kpn, mask=valid, other=0) != 0
    else:
        keep = tl.zeros([1, 1], tl.int8) != 0
    return keep


@triton.jit
def exp_units(x, NATURAL: tl.constexpr):
    """exp of a score difference `x` in the variant's units (natural under NATURAL, else base 2)."""
    if NATURAL:
        r = tl.math.exp2(x * LOG2E)
    else:
        r = tl.math.exp2(x)
    return r


@triton.jit
def tile_live(bias, keep, row_max, row_valid, HAS_BIAS: tl.constexpr, HAS_KEEP: tl.constexpr):
    """False when the tile contributes nothing: no kept entry, or a bias <= BIAS_SKIP everywhere
    while every valid row's maximum (`row_max`) is >= ROW_LIVE (module docstring)."""
    if HAS_BIAS:
        settled = tl.min(tl.where(row_valid, row_max, float("inf"))) >= ROW_LIVE
        live = (tl.max(bias) > BIAS_SKIP) | (settled == 0)
        if HAS_KEEP:
            live = live & (tl.max(keep.to(tl.int32)) > 0)
    else:
        live = tl.max(keep.to(tl.int32)) > 0
    return live


@triton.jit
def scores(
    qk, i2, j2, valid, bias, keep, alibi_h, window, qk_scale, cap2,
    ELEM_TY: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_KEEP: tl.constexpr,
    HAS_ALIBI: tl.constexpr, SOFTCAP: tl.constexpr, CAUSAL: tl.constexpr,
    WINDOW: tl.constexpr, MASKED: tl.constexpr,
):
    """Scores of the tile `qk` (q . k in fp32) at query indices i2, key indices j2 (2-D, either
    orientation), in natural units under HAS_BIAS, else in base 2 (module docstring).
    `qk_scale` is scale * unit, or scale / softcap with SOFTCAP, where `cap2` = softcap * unit
    (unit: 1 or log2(e)). MASKED applies `valid` and the causal/window masks."""
    if SOFTCAP:
        s = tanh(qk * qk_scale) * cap2
    else:
        s = qk * qk_scale
    if HAS_ALIBI:
        slope = round_to(alibi_h * (j2 - i2).to(tl.float32), ELEM_TY)
        if HAS_BIAS:
            s += slope
        else:
            s += slope * LOG2E
    if HAS_BIAS:
        s += bias
    if MASKED:
        ok = valid
        if CAUSAL:
            ok = ok & (j2 <= i2)
        if WINDOW:
            ok = ok & (j2 > i2 - window)
        s = tl.where(ok, s, float("-inf"))
    if HAS_KEEP:
        s = tl.where(keep, s, float("-inf"))
    return s


@triton.jit
def key_bounds(m0, Sk, window, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
               CAUSAL: tl.constexpr, WINDOW: tl.constexpr):
    """Key ranges for the query rows [m0, m0 + BLOCK_M): (lo, full_lo, full_hi, hi). Tiles in
    [lo, hi) may hold a visible key; those in [full_lo, full_hi) (multiples of BLOCK_N) hold only
    visible, in-range keys for every row, so they need no element mask."""
    lo = m0 * 0
    hi = m0 * 0 + Sk
    full_lo = lo
    full_hi = (Sk // BLOCK_N) * BLOCK_N + lo
    if CAUSAL:
        hi = tl.minimum(hi, m0 + BLOCK_M)  # keys j <= i < m0 + BLOCK_M
        full_hi = tl.minimum(full_hi, ((m0 + 1) // BLOCK_N) * BLOCK_N)  # tile end <= m0 + 1
    if WINDOW:
        lo = (tl.maximum(m0 - window + 1, 0) // BLOCK_N) * BLOCK_N  # keys j > i - window >= m0 - window
        start = tl.maximum(m0 + BLOCK_M - window, 0)  # every row sees keys from here on
        full_lo = ((start + BLOCK_N - 1) // BLOCK_N) * BLOCK_N
    hi = tl.maximum(hi, lo)
    full_lo = tl.minimum(tl.maximum(full_lo, lo), hi)
    full_hi = tl.maximum(tl.minimum(full_hi, hi), full_lo)
    return lo, full_lo, full_hi, hi


@triton.jit
def tile_dead(bias_base, keep_base, i2, j2, sbm, sbn, kpm, kpn, valid, settled,
              HAS_BIAS: tl.constexpr, HAS_KEEP: tl.constexpr):
    """True when the tile at (i2, j2) is dead (module docstring); `settled` (a scalar) says
    whether every row's maximum is known to be >= ROW_LIVE."""
    bias = load_bias(bias_base, i2, j2, sbm, sbn, valid, HAS_BIAS)
    keep = load_keep(keep_base, i2, j2, kpm, kpn, valid, HAS_KEEP)
    if HAS_BIAS:
        dead = (tl.max(bias) <= BIAS_SKIP) & settled
        if HAS_KEEP:
            dead = dead | (tl.max(keep.to(tl.int32)) == 0)
    else:
        dead = tl.max(keep.to(tl.int32)) == 0
    return dead


@triton.jit
def trim_keys(lo, hi, offs_m, row_valid, bias_base, keep_base, sbm, sbn, kpm, kpn, Sk, settled,
              BLOCK_N: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_KEEP: tl.constexpr):
    """(start, end): the key tiles [lo, hi) (starts lo + t * BLOCK_N) less the dead tiles at
    either end, for the query rows offs_m."""
    i2 = offs_m[:, None]
    start = lo
    go = start < hi
    while go:
        offs_n = start + tl.arange(0, BLOCK_N)
        valid = row_valid[:, None] & (offs_n < Sk)[None, :]
        dead = tile_dead(bias_base, keep_base, i2, offs_n[None, :], sbm, sbn, kpm, kpn, valid,
                         settled, HAS_BIAS, HAS_KEEP)
        start = tl.where(dead, start + BLOCK_N, start)
        go = dead & (start < hi)
    last = lo + (tl.maximum(hi - 1 - lo, 0) // BLOCK_N) * BLOCK_N
    go = (last >= start) & (hi > lo)
    while go:
        offs_n = last + tl.arange(0, BLOCK_N)
        valid = row_valid[:, None] & (offs_n < Sk)[None, :]
        dead = tile_dead(bias_base, keep_base, i2, offs_n[None, :], sbm, sbn, kpm, kpn, valid,
                         settled, HAS_BIAS, HAS_KEEP)
        last = tl.where(dead, last - BLOCK_N, last)
        go = dead & (last >= start)
    return start, tl.maximum(tl.minimum(hi, last + BLOCK_N), start)


@triton.jit
def _fwd_step(
    acc, m_i, l_i, q, kT, v, i2, offs_n, valid, bias, keep, alibi_h, window, qk_scale, cap2,
    HAS_BIAS: tl.constexpr, HAS_KEEP: tl.constexpr, HAS_ALIBI: tl.constexpr,
    SOFTCAP: tl.constexpr, CAUSAL: tl.constexpr, WINDOW: tl.constexpr,
    MASKED: tl.constexpr, IEEE: tl.constexpr,
):
    """One key tile (kT, v) of the online softmax: returns the updated (acc, m_i, l_i)."""
    qk = dot(q, kT, IEEE)
    s = scores(qk, i2, offs_n[None, :], valid, bias, keep, alibi_h, window, qk_scale, cap2,
               q.dtype, HAS_BIAS, HAS_KEEP, HAS_ALIBI, SOFTCAP, CAUSAL, WINDOW, MASKED)
    m_new = tl.maximum(m_i, tl.max(s, 1))
    m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with nothing visible yet
    alpha = exp_units(m_i - m_use, HAS_BIAS)
    p = exp_units(s - m_use[:, None], HAS_BIAS)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None] + dot(p.to(v.dtype), v, IEEE)
    return acc, m_new, l_i


@triton.jit
def _fwd_tiles(
    acc, m_i, l_i, q, lo, hi, offs_m, row_valid, k_base, v_base, bias_base, keep_base, alibi_h,
    skn, skd, svn, svd, sbm, sbn, kpm, kpn, Sk, window, qk_scale, cap2,
    HEAD_DIM: tl.constexpr, D_PAD: tl.constexpr, BLOCK_N: tl.constexpr, D_MASKED: tl.constexpr,
    HAS_BIAS: tl.constexpr, HAS_KEEP: tl.constexpr, SKIP_TILES: tl.constexpr,
    HAS_ALIBI: tl.constexpr, SOFTCAP: tl.constexpr, CAUSAL: tl.constexpr, WINDOW: tl.constexpr,
    MASKED: tl.constexpr, IEEE: tl.constexpr,
):
    """The key tiles [lo, hi) (step BLOCK_N) for one query block. K and V tiles are loaded
    before the skip test, so the loads stay in the software pipeline (num_stages)."""
    i2 = offs_m[:, None]
    offs_d = tl.arange(0, D_PAD)
    d_valid = offs_d < HEAD_DIM
    for n0 in range(lo, hi, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        col_valid = offs_n < Sk
        valid = row_valid[:, None] & col_valid[None, :]
        bias = load_bias(bias_base, i2, offs_n[None, :], sbm, sbn, valid, HAS_BIAS)
        keep = load_keep(keep_base, i2, offs_n[None, :], kpm, kpn, valid, HAS_KEEP)
        kT = load2(k_base + offs_d[:, None] * skd + offs_n[None, :] * skn, d_valid, col_valid,
                   D_MASKED, MASKED)
        v = load2(v_base + offs_n[:, None] * svn + offs_d[None, :] * svd, col_valid, d_valid,
                  MASKED, D_MASKED)
        if SKIP_TILES:
            if tile_live(bias, keep, m_i, row_valid, HAS_BIAS, HAS_KEEP):
                acc, m_i, l_i = _fwd_step(
                    acc, m_i, l_i, q, kT, v, i2, offs_n, valid, bias, keep, alibi_h, window,
                    qk_scale, cap2, HAS_BIAS, HAS_KEEP, HAS_ALIBI, SOFTCAP, CAUSAL, WINDOW,
                    MASKED, IEEE)
        else:
            acc, m_i, l_i = _fwd_step(
                acc, m_i, l_i, q, kT, v, i2, offs_n, valid, bias, keep, alibi_h, window,
                qk_scale, cap2, HAS_BIAS, HAS_KEEP, HAS_ALIBI, SOFTCAP, CAUSAL, WINDOW, MASKED,
                IEEE)
    return acc, m_i, l_i


@triton.jit
def attention_fwd_kernel(
    Q, K, V, BIAS, KEEP, ALIBI, OUT, LSE,
    sqb, sqh, sqm, sqd, skb, skh, skn, skd, svb, svh, svn, svd,
    sbb, sbh, sbm, sbn, kpb, kph, kpm, kpn,
    H, GROUP, Sq, Sk, window, qk_scale, cap2,
    HEAD_DIM: tl.constexpr, D_PAD: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    D_MASKED: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_KEEP: tl.constexpr, TRIM: tl.constexpr,
    SKIP_TILES: tl.constexpr, HAS_ALIBI: tl.constexpr, SOFTCAP: tl.constexpr,
    CAUSAL: tl.constexpr, WINDOW: tl.constexpr, IEEE: tl.constexpr,
):
    """out, lse for one block of BLOCK_M query rows of one (batch, head).

    Grid: (cdiv(Sq, BLOCK_M), B * H), the query blocks taken last-first (under CAUSAL the
    longest ones start first). OUT is contiguous (B, H, Sq, HEAD_DIM), LSE contiguous (B, H, Sq).
    """
    pid_m = tl.num_programs(0) - 1 - tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = (pid_bh // H).to(tl.int64)
    h = pid_bh % H
    hk = (h // GROUP).to(tl.int64)
    m0 = pid_m * BLOCK_M
    offs_m = m0 + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D_PAD)
    row_valid = offs_m < Sq
    d_valid = offs_d < HEAD_DIM
    q_base = Q + b * sqb + h.to(tl.int64) * sqh
    q = load2(q_base + offs_m[:, None] * sqm + offs_d[None, :] * sqd, row_valid, d_valid,
              True, D_MASKED)
    k_base = K + b * skb + hk * skh
    v_base = V + b * svb + hk * svh
    bias_base = BIAS + b * sbb + h.to(tl.int64) * sbh
    keep_base = KEEP + b * kpb + h.to(tl.int64) * kph
    alibi_h = 0.0
    if HAS_ALIBI:
        alibi_h = tl.load(ALIBI + h)

    acc = tl.zeros([BLOCK_M, D_PAD], tl.float32)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    lo, full_lo, full_hi, hi = key_bounds(m0, Sk, window, BLOCK_M, BLOCK_N, CAUSAL, WINDOW)
    lo_t = lo
    hi_t = hi
    if TRIM:
        lo_t, hi_t = trim_keys(lo, hi, offs_m, row_valid, bias_base, keep_base, sbm, sbn, kpm,
                               kpn, Sk, True, BLOCK_N, HAS_BIAS, HAS_KEEP)
        full_lo = tl.minimum(tl.maximum(full_lo, lo_t), hi_t)
        full_hi = tl.maximum(tl.minimum(full_hi, hi_t), full_lo)
    if WINDOW:
        acc, m_i, l_i = _fwd_tiles(
            acc, m_i, l_i, q, lo_t, full_lo, offs_m, row_valid, k_base, v_base, bias_base,
            keep_base, alibi_h, skn, skd, svn, svd, sbm, sbn, kpm, kpn, Sk, window, qk_scale,
            cap2, HEAD_DIM, D_PAD, BLOCK_N, D_MASKED, HAS_BIAS, HAS_KEEP, SKIP_TILES, HAS_ALIBI,
            SOFTCAP, CAUSAL, WINDOW, True, IEEE)
    acc, m_i, l_i = _fwd_tiles(
        acc, m_i, l_i, q, full_lo, full_hi, offs_m, row_valid, k_base, v_base, bias_base,
        keep_base, alibi_h, skn, skd, svn, svd, sbm, sbn, kpm, kpn, Sk, window, qk_scale,
        cap2, HEAD_DIM, D_PAD, BLOCK_N, D_MASKED, HAS_BIAS, HAS_KEEP, SKIP_TILES, HAS_ALIBI,
        SOFTCAP, CAUSAL, WINDOW, False, IEEE)
    acc, m_i, l_i = _fwd_tiles(
        acc, m_i, l_i, q, full_hi, hi_t, offs_m, row_valid, k_base, v_base, bias_base,
        keep_base, alibi_h, skn, skd, svn, svd, sbm, sbn, kpm, kpn, Sk, window, qk_scale,
        cap2, HEAD_DIM, D_PAD, BLOCK_N, D_MASKED, HAS_BIAS, HAS_KEEP, SKIP_TILES, HAS_ALIBI,
        SOFTCAP, CAUSAL, WINDOW, True, IEEE)
    if TRIM:
        if HAS_BIAS:  # a row with no maximum >= ROW_LIVE: the trimmed bias-dead tiles count
            if tl.min(tl.where(row_valid, m_i, float("inf"))) < ROW_LIVE:
                acc, m_i, l_i = _fwd_tiles(
                    acc, m_i, l_i, q, lo, lo_t, offs_m, row_valid, k_base, v_base, bias_base,
                    keep_base, alibi_h, skn, skd, svn, svd, sbm, sbn, kpm, kpn, Sk, window,
                    qk_scale, cap2, HEAD_DIM, D_PAD, BLOCK_N, D_MASKED, HAS_BIAS, HAS_KEEP,
                    SKIP_TILES, HAS_ALIBI, SOFTCAP, CAUSAL, WINDOW, True, IEEE)
                acc, m_i, l_i = _fwd_tiles(
                    acc, m_i, l_i, q, hi_t, hi, offs_m, row_valid, k_base, v_base, bias_base,
                    keep_base, alibi_h, skn, skd, svn, svd, sbm, sbn, kpm, kpn, Sk, window,
                    qk_scale, cap2, HEAD_DIM, D_PAD, BLOCK_N, D_MASKED, HAS_BIAS, HAS_KEEP,
                    SKIP_TILES, HAS_ALIBI, SOFTCAP, CAUSAL, WINDOW, True, IEEE)

    empty = l_i == 0.0  # every score -inf: out 0, lse -inf
    l_safe = tl.where(empty, 1.0, l_i)
    out = acc / l_safe[:, None]
    if HAS_BIAS:
        lse = m_i + tl.math.log2(l_safe) * LN2
    else:
        lse = (m_i + tl.math.log2(l_safe)) * LN2
    lse = tl.where(empty, float("-inf"), lse)
    row = pid_bh.to(tl.int64) * Sq + offs_m
    o_ptrs = OUT + row[:, None] * HEAD_DIM + offs_d[None, :]
    tl.store(o_ptrs, out.to(OUT.dtype.element_ty), mask=row_valid[:, None] & d_valid[None, :])
    tl.store(LSE + row, lse, mask=row_valid)
