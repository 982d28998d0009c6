"""coil's looped softmax, log_softmax and cross-entropy against eager on CUDA, special rows included (session 22).

    python bench/online_softmax_check.py

Rows of 50257 and 300000 columns (looped reductions: one running max and one rescaled running sum
per row when the online softmax applies) in float32, float16 and bfloat16. Rows hold a NaN, a
+inf, only -inf, a -inf prefix longer than a loop step, and a very large first or last value.
Each function is compiled with backend="coil" and compared with eager in the same dtype: NaN at
the same places, the rest within the dtype's tolerance. Prints one line per case and exits
non-zero on a mismatch. triton-codegen's CPU tests (tests/test_online_softmax.py) run the same
semantics under the interpreter; this checks the compiled kernels on the GPU.
"""

from __future__ import annotations

import sys

import coil.backend  # noqa: F401  (registers backend="coil")
import torch
import torch.nn.functional as F

TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 2e-2}


def _rows(cols: int, dtype: torch.dtype) -> torch.Tensor:
    torch.manual_seed(0)
    x = torch.randn(8, cols, device="cuda") * 3
    x[0, cols // 3] = float("nan")
    x[1, -1] = float("inf")
    x[2, :] = float("-inf")
    x[3, : cols // 2] = float("-inf")
    x[4, 0] = 1e4
    x[5, -1] = 1e4
    x[6, 7] = -1e4
    return x.to(dtype)


def _close(g: torch.Tensor, w: torch.Tensor, tol: float) -> bool:
    if not torch.equal(g.isnan(), w.isnan()):
        return False
    g, w = g.double().nan_to_num(0.0, 1e30, -1e30), w.double().nan_to_num(0.0, 1e30, -1e30)
    return bool(((g - w).abs() <= tol * (1 + w.abs())).all())


def main() -> int:
    bad = 0
    fns = {
        "softmax": lambda x, t: torch.softmax(x, -1),
        "log_softmax": lambda x, t: torch.log_softmax(x.float(), -1),
        "cross_entropy": lambda x, t: F.cross_entropy(x.float(), t, reduction="none"),
        "softmax_scaled": lambda x, t: torch.softmax(x * 0.5, -1),
    }
    for cols in (50257, 300000):
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            x = _rows(cols, dtype)
            t = torch.randint(0, cols, (8,), device="cuda")
            for name, fn in fns.items():
                torch._dynamo.reset()
                got = torch.compile(fn, backend="coil")(x, t)
                ok = _close(got, fn(x, t), TOL[dtype])
                bad += not ok
                print(f"{name:15s} cols {cols:6d} {dtype!s:15s}: {'ok' if ok else 'MISMATCH'}", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
