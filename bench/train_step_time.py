"""coil's time for one `coil bench` training case, alone (no eager or Inductor run): compile,
three warm-up steps, then the median of triton.testing.do_bench over the step.

    python bench/train_step_time.py CASE [LABEL] [POINTWISE_WARPS]   (e.g. gpt2_train_amp)

POINTWISE_WARPS forces the warps of 1024-wide pointwise kernels (as bench/pointwise_warps_probe.py).

Used to compare coil builds (different wheels on PYTHONPATH) on one model cheaply.
"""

from __future__ import annotations

import sys

import torch
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

    spec, kind = bm._split(argv[1])
    assert kind == "train_amp", "training cases only"
    model = bm._model(spec)
    inputs = spec.inputs(model)
    f = torch.compile(model, backend="coil")

    def step() -> None:
        bm._train_step(spec, f, inputs)

    for _ in range(3):
        step()
    ms = triton.testing.do_bench(step, warmup=10, rep=100, return_mode="median")
    label = argv[2] if len(argv) > 2 else ""
    print(f"{argv[1]} {label}: {ms:.3f} ms", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
