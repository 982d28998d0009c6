"""coil's max/min reductions against eager on CUDA, NaN and infinities included (session 21).

    python bench/nan_reduce_check.py

amax/amin over rows of 10 (one block per row: persistent) and of 300000 (looped) columns, in
float64, float32, float16 and bfloat16, each compiled with backend="coil", compared with eager
bit for bit (NaN where eager has NaN). Prints one line per case and exits non-zero on a
mismatch. triton-codegen's CPU tests (test_amax_amin_propagate_nan) run the same semantics under
the interpreter; this checks the PTX (max.NaN / min.NaN) on the GPU.
"""

from __future__ import annotations

import sys

import coil.backend  # noqa: F401  (registers backend="coil")
import torch


def _rows(cols: int, dtype: torch.dtype) -> torch.Tensor:
    torch.manual_seed(0)
    x = torch.randn(6, cols, device="cuda").to(dtype)
    x[0, 0] = float("nan")
    x[1, -1] = float("nan")
    x[2, cols // 2] = float("inf")
    x[3, :] = float("-inf")
    x[4, 1] = float("nan")
    x[4, 2] = float("inf")
    return x


def main() -> int:
    bad = 0
    for cols in (10, 300000):
        for dtype in (torch.float64, torch.float32, torch.float16, torch.bfloat16):
            torch._dynamo.reset()
            f = torch.compile(lambda x: (x.amax(1), x.amin(1), x.max(), (x * 2).amax(0)), backend="coil")
            x = _rows(cols, dtype)
            got, want = f(x), (x.amax(1), x.amin(1), x.max(), (x * 2).amax(0))
            ok = all(torch.equal(g.isnan(), w.isnan()) and torch.equal(g.nan_to_num(0.0), w.nan_to_num(0.0))
                     for g, w in zip(got, want, strict=True))
            bad += not ok
            print(f"cols {cols:6d} {dtype!s:15s}: {'ok' if ok else 'MISMATCH'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
