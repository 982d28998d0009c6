"""How fast a looped (online) softmax kernel can be, configuration by configuration (CUDA; session 22).

    python bench/looped_softmax_variants.py [--reps N]

The kernel coil generates for `torch.softmax(x, -1)` over rows longer than a block (the
online softmax of session 22: a running max and a rescaled running sum in one loop, then a
second loop that writes exp(x - max) / sum) is written here by hand and timed with
`triton.testing.do_bench` under a grid of XBLOCK (rows per program), RBLOCK (loop step) and
warps, beside torch.compile's default (Inductor) on the same input, for 4096 x 50257 and
8192 x 32000 in bf16 and fp32. Variants:

- `rev`: the second loop walks the row backwards, so that it first reads what the first loop
  read last (still in L2);
- `recip`: exp(x - max) * (1 / sum) instead of a division per element.

Each variant's result is checked against eager fp32 softmax.
"""

from __future__ import annotations

import argparse
import functools

import torch
import triton
import triton.language as tl


@triton.jit
def _softmax(x_ptr, y_ptr, xnumel, rnumel, REV: tl.constexpr, RECIP: tl.constexpr,
             XBLOCK: tl.constexpr, RBLOCK: tl.constexpr):
    xi = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[:, None]
    xm = xi < xnumel
    m = tl.full([XBLOCK, RBLOCK], float("-inf"), tl.float32)
    s = tl.full([XBLOCK, RBLOCK], 0, tl.float32)
    for off in range(0, rnumel, RBLOCK):
        ri = off + tl.arange(0, RBLOCK)[None, :]
        rm = ri < rnumel
        v = tl.load(x_ptr + (ri + rnumel * xi), xm & rm, other=0, eviction_policy="evict_last").to(tl.float32)
        m2 = tl.where(xm & rm, tl.where((m != m) | (v != v), m + v, tl.maximum(m, v)), m)
        s = tl.where(xm & rm, tl.where(m2 == float("-inf"), 0.0, s * tl.exp(m - m2) + tl.exp(v - m2)), s)
        m = m2
    mx = tl.max(m, 1)[:, None]
    sm = tl.sum(s * tl.exp(m - mx), 1)[:, None]
    inv = 1.0 / sm
    nsteps = tl.cdiv(rnumel, RBLOCK)
    for k in range(0, nsteps):
        if REV:  # noqa: SIM108  (constexpr branches, kept as the GPU run had them)
            off = (nsteps - 1 - k) * RBLOCK
        else:
            off = k * RBLOCK
        ri = off + tl.arange(0, RBLOCK)[None, :]
        rm = ri < rnumel
        v = tl.load(x_ptr + (ri + rnumel * xi), xm & rm, other=0, eviction_policy="evict_first").to(tl.float32)
        e = tl.exp(v - mx)
        if RECIP:  # noqa: SIM108
            y = e * inv
        else:
            y = e / sm
        tl.store(y_ptr + (ri + rnumel * xi), y.to(y_ptr.dtype.element_ty), xm & rm)


def _launch(x: torch.Tensor, y: torch.Tensor, rows: int, cols: int, rev: int, recip: int, xb: int, rb: int,
            w: int) -> None:
    _softmax[(triton.cdiv(rows, xb),)](x, y, rows, cols, rev, recip, xb, rb, num_warps=w)


CONFIGS = [(x, r, w) for x in (1, 2, 4) for r in (1024, 2048, 4096, 8192) for w in (4, 8, 16, 32)
           if x * r <= 16384 and w * 32 * 4 <= x * r]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=100)
    a = ap.parse_args()
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, Triton {triton.__version__}", flush=True)
    for rows, cols in ((4096, 50257), (8192, 32000)):
        for dt in (torch.bfloat16, torch.float32):
            torch.manual_seed(0)
            x = torch.randn(rows, cols, device="cuda", dtype=dt)
            ref = torch.softmax(x.float(), -1)
            y = torch.empty_like(x)
            bench = functools.partial(triton.testing.do_bench, warmup=25, rep=a.reps, return_mode="median")
            ind = torch.compile(lambda t: torch.softmax(t, -1))
            ind(x)
            copy = bench(functools.partial(y.copy_, x))
            t_ind = bench(functools.partial(ind, x))
            print(f"== softmax {rows}x{cols} {str(dt).split('.')[-1]}: copy {copy:.4f} ms, inductor {t_ind:.4f} ms",
                  flush=True)
            rows_out = []
            for rev in (0, 1):
                for recip in (0, 1):
                    for xb, rb, w in CONFIGS:
                        if (rev or recip) and (xb, rb, w) not in ((1, 2048, 16), (1, 4096, 16), (4, 1024, 8), (1, 2048, 8)):
                            continue
                        run = functools.partial(_launch, x, y, rows, cols, rev, recip, xb, rb, w)
                        run()
                        err = (y.float() - ref).abs().max().item()
                        t = bench(run)
                        rows_out.append((t, f"  rev {rev} recip {recip} X {xb} R {rb:5d} w {w:2d}: {t:.4f} ms "
                                            f"ratio/ind {t / t_ind:.3f} err {err:.1e}"))
            rows_out.sort()
            for _, line in rows_out[:12]:
                print(line, flush=True)
            for _, line in rows_out:
                if " X 4 R  1024 w  8" in line and "rev 0 recip 0" in line:
                    print("  (coil default) " + line.strip(), flush=True)


if __name__ == "__main__":
    main()
