"""coil's time for one `coil bench` model case, alone (no eager or Inductor run): compile and
first step (its seconds printed), three warm-up steps, then the median of triton.testing.do_bench
over the step, and the peak memory of one warm step (`coil bench`'s rule, `_warm_peak`).

    python bench/train_step_time.py CASE [LABEL] [POINTWISE_WARPS]   (e.g. gpt2_train_amp)

LABEL "inductor" times `torch.compile`'s default backend instead of coil. POINTWISE_WARPS forces the warps of 1024-wide pointwise kernels (as bench/pointwise_warps_probe.py).

Used to compare coil builds (different wheels on PYTHONPATH) on one model cheaply.
"""

from __future__ import annotations

import sys

import triton


def main(argv: list[str]) -> int:
    from coil.backend import bench_models as bm

    if len(argv) > 3:
        import coil.triton_codegen.kernel as K
        from coil.triton_codegen.config import KernelConfig

        original, warps = K.choose, int(argv[3])

        def choose(xnumel, rnumel, is_reduction, target, strategy, x_contiguous):  # type: ignore[no-untyped-def]
            cfg = original(xnumel, rnumel, is_reduction, target, strategy, x_contiguous)
            if cfg.strategy == "pointwise" and cfg.xblock >= 1024:
                return KernelConfig("pointwise", cfg.xblock, 1, warps)
            return cfg

        K.choose = choose

    label = argv[2] if len(argv) > 2 else ""
    first_s, step = bm.first_call(argv[1], "inductor" if label == "inductor" else "coil")
    for _ in range(3):
        step()
    ms = triton.testing.do_bench(step, warmup=10, rep=100, return_mode="median")
    from coil.backend.bench import _warm_peak

    peak = _warm_peak(step)
    print(f"{argv[1]} {label}: {ms:.3f} ms (first call {first_s:.1f} s; warm peak reserved "
          f"{peak['peak_mib']:.0f} MiB, allocated {peak['peak_allocated_mib']:.0f})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
