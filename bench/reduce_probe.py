"""Time sum over dim 0 and dim 1 of a 16384 x 8192 tensor (bf16, fp32): eager, Inductor, coil.

    python bench/reduce_probe.py [coil|inductor|eager ...]

Self-contained (does not use coil's bench module), so it runs against any coil version: used
to bisect a regression by installing two builds side by side. COIL_LOGS=kernels prints the kernels.
"""

from __future__ import annotations

import sys

import torch
import triton.testing


def main(modes: list[str]) -> None:
    for dtype in (torch.bfloat16, torch.float32):
        x = torch.randn(16384, 8192, device="cuda", dtype=dtype)
        for dim in (0, 1):
            def f(t: torch.Tensor, d: int = dim) -> torch.Tensor:
                return t.sum(d)

            ref = f(x.double())
            for mode in modes:
                torch._dynamo.reset()
                g = f if mode == "eager" else torch.compile(f) if mode == "inductor" else torch.compile(f, backend="coil")
                out = g(x)
                err = float((out.double() - ref).abs().max())
                ms = triton.testing.do_bench(lambda g=g, x=x: g(x), warmup=50, rep=300)
                gbs = x.numel() * x.element_size() / ms / 1e6
                print(f"sum dim{dim} {str(dtype)[6:]:8s} {mode:8s} {ms:.4f} ms {gbs:7.0f} GB/s  max err {err:.3g}",
                      flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or ["eager", "inductor", "coil"])
