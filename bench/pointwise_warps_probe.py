"""Launch configurations of big pointwise kernels on the GPU: coil bench's bias+GELU and pointwise
chain (bf16 and fp32, 16384 x 8192) compiled with coil under several (XBLOCK, num_warps) for
pointwise kernels, timed with triton.testing.do_bench (median ms) against a device copy.

    python bench/pointwise_warps_probe.py [XBLOCK/WARPS ...]

With arguments (e.g. 1024/2 4096/8), those configurations instead of the default six.

The configuration is forced by wrapping triton_codegen.config.choose inside this process
(pointwise kernels of at least 1024 elements only). Used in session 4 to pick the warps that
replaced the miscompiled XBLOCK 1024 / 4 warps (bench/triton_miscompile).
"""

from __future__ import annotations

import sys

import torch
import triton


def main() -> int:
    import coil.backend
    import coil.triton_codegen.kernel as K
    from coil.backend import bench as B
    from coil.triton_codegen.config import KernelConfig

    original = K.choose
    configs = [tuple(int(v) for v in a.split("/")) for a in sys.argv[1:]] or [
        (1024, 4), (1024, 8), (1024, 2), (2048, 8), (512, 4), (2048, 4)]
    cases = [m for m in B.MICRO if m.base in ("bias_gelu", "pointwise_chain")]
    print(f"torch {torch.__version__}, triton {triton.__version__}, {torch.cuda.get_device_name()}")
    for dtype in (torch.bfloat16, torch.float32):
        for m in cases:
            inputs = m.make(dtype)
            row = []
            for xblock, warps in configs:
                def choose(xnumel, rnumel, is_reduction, target, strategy, x_contiguous,
                           xblock=xblock, warps=warps):  # type: ignore[no-untyped-def]
                    cfg = original(xnumel, rnumel, is_reduction, target, strategy, x_contiguous)
                    if cfg.strategy == "pointwise" and xnumel >= 1024:
                        return KernelConfig("pointwise", xblock, 1, warps)
                    return cfg

                K.choose = choose
                torch._dynamo.reset()
                coil.backend.reset()
                f = torch.compile(m.fn, backend="coil")
                f(*inputs)
                ms = triton.testing.do_bench(lambda f=f, inputs=inputs: f(*inputs), warmup=25, rep=200, return_mode="median")
                ms = min(ms, triton.testing.do_bench(lambda f=f, inputs=inputs: f(*inputs), warmup=25, rep=200, return_mode="median"))
                row.append(f"{xblock}/{warps}: {ms:.3f}")
            K.choose = original
            print(f"{m.base} {str(dtype).removeprefix('torch.')}: " + "  ".join(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
