"""Triton compile time per kernel of coil's GPT-2 training graphs, for sm_90, on a machine without
a GPU (Triton compiles for a named target offline; ptxas ships with its wheel).

    python bench/offline_compile_times.py [--layers 12] [--seq 64] [--limit N] [--top 5]

The model (HF GPT2LMHeadModel(GPT2Config(n_layer=layers)), training mode: dropout on) is compiled
with backend="coil" on the CPU with the kernels generated for the "cuda" target; the kernel specs
are captured at coil.runtime.compile_kernels (each graph then falls back to eager: nothing runs
on the interpreter). Each kernel is then compiled with `triton.compile(ASTSource(...),
target=GPUTarget("cuda", 90, 32))` in this process, one after another, with an empty
TRITON_CACHE_DIR; prints the total, the median and the slowest kernels. The first compile also
pays Triton's one-time set-up (~1 s). Block sizes follow coil's CUDA rule, but at this batch and
sequence length, not the bench's. docs/perf.md (sessions 7 and 8) has a measurement.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
from types import SimpleNamespace
from typing import Any

_TYPES = {"float32": "*fp32", "float16": "*fp16", "bfloat16": "*bf16", "float64": "*fp64", "int64": "*i64",
          "int32": "*i32", "int16": "*i16", "int8": "*i8", "uint8": "*u8", "bool": "*i1"}


def capture(layers: int, seq: int) -> list[Any]:
    """coil's KernelSpecs for one GPT-2 training step, generated for the "cuda" target (run with
    TRITON_INTERPRET=1: on the CPU coil compiles for the interpreter)."""
    import coil.backend  # noqa: F401  (registers backend="coil")
    import coil.backend.compile as bc
    import torch
    import transformers

    specs: list[Any] = []

    def spy(got: Any, device: Any) -> Any:
        specs.extend(got)
        raise RuntimeError("offline_compile_times: specs captured")

    import coil.runtime.compile as rc

    generate = bc.generate_schedule
    bc.generate_schedule = lambda sched, bufs, target, *a, **k: generate(sched, bufs, "cuda", *a, **k)
    real = rc.compile_kernels
    for module in list(sys.modules.values()):  # every module that imported it by name
        if getattr(module, "compile_kernels", None) is real:
            module.compile_kernels = spy  # type: ignore[attr-defined]
    cfg = transformers.GPT2Config(n_layer=layers)
    model = transformers.GPT2LMHeadModel(cfg)
    x = torch.randint(0, cfg.vocab_size, (1, seq))
    compiled = torch.compile(model, backend="coil")
    compiled(x, labels=x).loss.backward()  # every graph falls back to eager after its capture
    return specs


def _fields(spec: Any) -> dict[str, Any]:
    args = [("T", str(a.dtype).removeprefix("torch.")) if hasattr(a, "dtype") else ("I", a) for a in spec.args]
    return {"name": spec.name, "source": spec.source, "args": args, "constexprs": dict(spec.constexprs),
            "num_warps": spec.num_warps, "num_stages": spec.num_stages}


def compile_one(spec: Any, folder: str) -> float:
    """Seconds to compile one KernelSpec for sm_90."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    path = os.path.join(folder, f"{spec.name}.py")
    with open(path, "w") as f:
        f.write(spec.source)
    loader = importlib.util.spec_from_file_location(spec.name, path)
    assert loader is not None and loader.loader is not None
    module = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(module)
    fn = getattr(module, spec.name)
    signature: dict[str, str] = {}
    for name, (kind, value) in zip(fn.arg_names, spec.args, strict=False):
        signature[name] = _TYPES[value] if kind == "T" else "i64" if abs(value) >= 2**31 else "i32"
    for name in fn.arg_names[len(spec.args):]:
        signature[name] = "constexpr"
    src = ASTSource(fn=fn, signature=signature, constexprs=dict(spec.constexprs))
    t = time.perf_counter()
    triton.compile(src, target=GPUTarget("cuda", 90, 32),
                   options={"num_warps": spec.num_warps, "num_stages": spec.num_stages})
    return time.perf_counter() - t


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--limit", type=int, default=0, help="compile only the first N kernels (0: all)")
    p.add_argument("--top", type=int, default=5)
    p.add_argument("--capture", help=argparse.SUPPRESS)  # internal: pickle the specs to this file
    a = p.parse_args(argv)
    if a.capture:
        with open(a.capture, "wb") as f:
            pickle.dump([_fields(s) for s in capture(a.layers, a.seq)], f)
        return 0
    fd, path = tempfile.mkstemp(suffix=".pkl")
    os.close(fd)
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    subprocess.run([sys.executable, __file__, "--layers", str(a.layers), "--seq", str(a.seq), "--capture", path],
                   env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(path, "rb") as f:
        specs = [SimpleNamespace(**d) for d in pickle.load(f)]
    os.environ.pop("TRITON_INTERPRET", None)
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="triton-cold-")
    specs = specs[: a.limit] if a.limit else specs
    folder = tempfile.mkdtemp(prefix="coil-kernels-")
    times = sorted(((compile_one(s, folder), s.name) for s in specs), reverse=True)
    total = sum(t for t, _ in times)
    print(f"{len(times)} kernels (GPT-2, {a.layers} layers, seq {a.seq}): {total:.1f} s in all, "
          f"median {statistics.median(t for t, _ in times):.2f} s")
    for t, name in times[: a.top]:
        print(f"  {t:6.2f} s  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
