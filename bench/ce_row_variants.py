"""How fast cross-entropy's row kernel can be, variant by variant (CUDA; session 21).

    python bench/ce_row_variants.py [--rows 16384] [--cols 8192]

The kernel coil generates for `F.cross_entropy(logits, target)` (bench.py's micro case) reads a
row, takes its max and its sum of exp(x - max), and gathers the target's logit for the row's
loss. This script times hand-written variants of that kernel with `triton.testing.do_bench`
beside a device-to-device copy of the logits, in bf16 and fp32, so that a codegen change is
chosen by numbers:

- `max`: how the row's max propagates NaN: "two" (coil before session 21: a max over the
  row's NaN flags, then tl.max), "one" (a single tl.reduce whose combine is
  tl.maximum(propagate_nan=ALL), PTX max.NaN), "none" (plain tl.max: the lower bound, wrong
  for NaN rows);
- `gather`: whether the kernel also gathers the target logit (the loss per row) or only
  writes the log-sum-exp;
- XBLOCK (rows per program) and warps.

Each variant's result is checked against eager PyTorch (fp32 log-sum-exp and target logit) on
rows with no NaN; "one" is also checked on a row holding a NaN.
"""

from __future__ import annotations

import argparse
import functools

import torch
import triton
import triton.language as tl


@triton.jit
def _max_nan(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _row(x_ptr, t_ptr, out_ptr, xnumel, rnumel, MAXMODE: tl.constexpr, GATHER: tl.constexpr,
         XBLOCK: tl.constexpr, RBLOCK: tl.constexpr):
    xi = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[:, None]
    xm = xi < xnumel
    ri = tl.arange(0, RBLOCK)[None, :]
    rm = ri < rnumel
    v = tl.load(x_ptr + (ri + rnumel * xi), xm & rm, other=0).to(tl.float32)
    if GATHER:
        t = tl.load(t_ptr + xi, xm, other=0)
        t = tl.where(t < 0, t + rnumel, t)
        g = tl.load(x_ptr + (t + rnumel * xi), xm, other=0).to(tl.float32)
    w = tl.where(xm & rm, v, float("-inf"))
    if MAXMODE == 0:
        nan = tl.max((w != w).to(tl.int8), 1)[:, None] > 0
        m = tl.where(nan, float("nan"), tl.max(w, 1)[:, None])
    elif MAXMODE == 1:
        m = tl.reduce(w, 1, _max_nan)[:, None]
    else:
        m = tl.max(w, 1)[:, None]
    s = tl.sum(tl.where(xm & rm, tl.exp(v - m), 0.0), 1)[:, None]
    lse = m + tl.log(s)
    if GATHER:
        lse = lse - g
    tl.store(out_ptr + xi, lse, xm)


MODES = {"two": 0, "one": 1, "none": 2}
CONFIGS = ((1, 4), (1, 8), (1, 16), (2, 8), (2, 16), (4, 16))  # (XBLOCK, warps)


def _launch(x: torch.Tensor, t: torch.Tensor, out: torch.Tensor, mode: str, gather: int, xb: int,
            warps: int) -> None:
    rows, cols = x.shape
    _row[(triton.cdiv(rows, xb),)](x, t, out, rows, cols, MODES[mode], gather, xb, triton.next_power_of_2(cols),
                                   num_warps=warps)


def _copy_ms(x: torch.Tensor) -> float:
    y = torch.empty_like(x)
    return float(triton.testing.do_bench(lambda: y.copy_(x), warmup=50, rep=300, return_mode="median"))


def run(rows: int, cols: int) -> None:
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, Triton {triton.__version__}; {rows} x {cols}")
    for dt in (torch.bfloat16, torch.float32):
        torch.manual_seed(0)
        x = torch.randn(rows, cols, device="cuda", dtype=dt)
        t = torch.randint(0, cols, (rows,), device="cuda")
        ref_lse = torch.logsumexp(x.float(), 1)
        ref_g = ref_lse - x.float().gather(1, t[:, None])[:, 0]
        copy = _copy_ms(x)
        nbytes = x.numel() * x.element_size()
        copy_gbs = 2 * nbytes / copy / 1e6
        print(f"\n== {dt}: copy {copy:.4f} ms = {copy_gbs:.0f} GB/s; reading the logits once at that rate: "
              f"{nbytes / copy_gbs / 1e6:.4f} ms")
        out = torch.empty(rows, device="cuda", dtype=torch.float32)
        for gather in (1, 0):
            for mode in MODES:
                for xb, warps in CONFIGS:
                    go = functools.partial(_launch, x, t, out, mode, gather, xb, warps)
                    go()
                    err = (out - (ref_g if gather else ref_lse)).abs().max().item()
                    ms = triton.testing.do_bench(go, warmup=50, rep=300, return_mode="median")
                    print(f"  gather {gather} max {mode:4s} XBLOCK {xb} warps {warps:2d}: {ms:.4f} ms, "
                          f"{nbytes / ms / 1e6 / copy_gbs * 100:.0f} % of copy, max err {err:.1e}")
        xn = x[:64].clone()
        xn[3, 5] = float("nan")
        _launch(xn, t, out, "one", 1, 1, 8)
        torch.cuda.synchronize()
        print(f"  NaN row with max 'one': row 3 {out[3].item()}, row 4 finite {bool(out[4].isfinite())}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=16384)
    ap.add_argument("--cols", type=int, default=8192)
    a = ap.parse_args()
    run(a.rows, a.cols)


if __name__ == "__main__":
    main()
