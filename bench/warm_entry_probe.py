"""Time the parts of a warm first call the way `coil bench`'s warm process counts it.

    python bench/warm_entry_probe.py CASE [--reset] [--modules PATH]

Builds the `coil bench` model case (coil.backend.bench_models), then prints the seconds of
`torch.compile(model, backend="coil")` itself and of the first step after it (synchronised), the
two together being what `bench_models.first_call` reports. `--reset` calls `torch._dynamo.reset()`
and `coil.backend.reset()` first, as bench/compile_profile.py did before its clock until session
27 (it now resets only between two runs of one process).
Used in session 27 to find why compile_profile's warm first call was ~1.3 s shorter than the
bench's on the same machine and caches (docs/perf.md).
"""

from __future__ import annotations

import argparse
import sys
import time

import torch


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("case")
    ap.add_argument("--reset", action="store_true")
    ap.add_argument("--modules", default=None)
    a = ap.parse_args()
    import coil.backend
    from coil.backend import bench_models as bm

    spec, kind = bm._split(a.case)
    model = bm._model(spec)
    inputs = spec.inputs(model)
    if kind == "infer_bf16":
        model = model.to(torch.bfloat16).eval()
    if a.reset:
        torch._dynamo.reset()
        coil.backend.reset()
    before = set(sys.modules)
    n0 = len(before)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    f = bm.compile_mode(model, "coil")
    t1 = time.perf_counter()
    n1 = len(sys.modules)
    (bm._infer_step if kind == "infer_bf16" else bm._train_step)(spec, f, inputs)
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    print(f"{a.case}{' --reset' if a.reset else ''}: torch.compile {t1 - t0:.3f} s ({n1 - n0} modules), "
          f"first step {t2 - t1:.3f} s ({len(sys.modules) - n1} modules), total {t2 - t0:.3f} s")
    if a.modules:
        with open(a.modules, "w") as fh:
            fh.write("".join(f"{m}\n" for m in sorted(set(sys.modules) - before)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
