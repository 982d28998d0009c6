"""What Inductor and coil run for a `coil bench` micro case, side by side (CUDA).

    python bench/micro_probe.py CASE [CASE ...] [--out DIR]

CASE is a micro case of `coil bench` (e.g. rmsnorm_bf16, sum_dim1_bf16). For each, on the
bench's inputs: the median time (`triton.testing.do_bench`) of Inductor (`torch.compile`
default) and of coil; Inductor's Triton kernels with the launch configuration its runtime
autotuning kept (block sizes, warps, stages) and their source, written to DIR/<case>_inductor.py;
coil's debug dir (kernels, schedule, wrapper) in DIR/<case>_coil/ with COIL_LOGS=autotune
printing every candidate coil timed. The point is to see what configuration a faster kernel
uses before changing coil's candidates or codegen.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
from pathlib import Path
from typing import Any

import torch


def _inductor_kernels() -> list[Any]:
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    return [o for o in gc.get_objects() if issubclass(type(o), CachingAutotuner)]  # weak proxies too


def micro_case(case: str) -> tuple[Any, torch.dtype, tuple[torch.Tensor, ...]]:
    """A `coil bench` micro case by name (e.g. rmsnorm_bf16): its Micro, dtype and inputs (seed 0)."""
    from coil.backend import bench

    name, _, dt = case.rpartition("_")
    micro = next(m for m in bench.MICRO if m.base == name)
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[dt]
    torch.manual_seed(0)
    return micro, dtype, micro.make(dtype)


def probe(case: str, out: Path) -> None:
    import triton

    micro, dtype, args = micro_case(case)
    print(f"\n== {case}: inputs {[tuple(a.shape) for a in args]} {dtype}, {torch.cuda.get_device_name()}")

    torch._dynamo.reset()
    before = {id(k) for k in _inductor_kernels()}
    ind = torch.compile(micro.fn)
    ind(*args)
    torch.cuda.synchronize()
    t_ind = triton.testing.do_bench(lambda: ind(*args), warmup=50, rep=300, return_mode="median")
    lines = []
    for k in _inductor_kernels():
        if id(k) in before:
            continue
        name = getattr(getattr(k, "fn", None), "__name__", "?")
        kept = [str(getattr(ln, "config", "?")) for ln in (getattr(k, "launchers", None) or [])]
        cands = [str(c) for c in (getattr(k, "configs", None) or [])]
        lines.append(f"# {name}: kept {kept}; candidates {cands}")
        lines.append(str(getattr(getattr(k, "fn", None), "src", "")))
        print(f"  inductor {name}: kept {kept} of {len(cands)} candidates")
    (out / f"{case}_inductor.py").write_text("\n".join(lines))

    torch._dynamo.reset()
    os.environ["COIL_DEBUG_DIR"] = str(out / f"{case}_coil")
    try:
        co = torch.compile(micro.fn, backend="coil")
        co(*args)
    finally:
        del os.environ["COIL_DEBUG_DIR"]
    torch.cuda.synchronize()
    t_coil = triton.testing.do_bench(lambda: co(*args), warmup=50, rep=300, return_mode="median")
    again = triton.testing.do_bench(lambda: ind(*args), warmup=50, rep=300, return_mode="median")
    print(f"  ms: inductor {t_ind:.4f} (again {again:.4f}), coil {t_coil:.4f}, coil / inductor {t_coil / min(t_ind, again):.3f}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("cases", nargs="+")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "out")))
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("COIL_LOGS", "autotune")
    for case in a.cases:
        probe(case, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
