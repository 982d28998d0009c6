"""Which part of an AOTAutograd cache entry holds a real CUDA tensor (torch 2.11 fails to pickle it).

    python bench/aot_pickle_probe.py CASE        (a `coil bench` model case, e.g. gpt2_train_amp)

Compiles CASE's step with backend="coil" (fresh cache folders), with torch's
`AOTAutogradCache._pickle_entry` wrapped: when it fails, prints the attribute paths inside the
entry that lead to CUDA tensors (up to 20), their sizes and dtypes, and the deepest attribute
paths that fail to pickle in the same context (the error of each).
"""

from __future__ import annotations

import os
import sys
import tempfile
from typing import Any

import torch


def cuda_tensors(obj: Any, path: str, out: list[str], seen: set[int], depth: int = 0) -> None:
    if len(out) >= 20 or depth > 12 or id(obj) in seen:
        return
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        if obj.device.type == "cuda":
            out.append(f"{path}: {type(obj).__name__} {tuple(obj.shape)} {obj.dtype}")
        return
    if isinstance(obj, dict):
        for k, v in obj.items():
            cuda_tensors(v, f"{path}[{k!r}]", out, seen, depth + 1)
    elif isinstance(obj, (list, tuple, set)):
        for i, v in enumerate(obj):
            cuda_tensors(v, f"{path}[{i}]", out, seen, depth + 1)
    elif hasattr(obj, "__dict__") and not isinstance(obj, type):
        for k, v in vars(obj).items():
            cuda_tensors(v, f"{path}.{k}", out, seen, depth + 1)
    elif hasattr(obj, "__slots__"):
        for k in obj.__slots__:
            if hasattr(obj, k):
                cuda_tensors(getattr(obj, k), f"{path}.{k}", out, seen, depth + 1)


def _children(obj: Any) -> list[tuple[str, Any]]:
    if isinstance(obj, dict):
        return [(f"[{k!r}]", v) for k, v in obj.items()]
    if isinstance(obj, (list, tuple, set)):
        return [(f"[{i}]", v) for i, v in enumerate(obj)]
    if hasattr(obj, "__dict__") and not isinstance(obj, type):
        return [(f".{k}", v) for k, v in vars(obj).items()]
    return []


def unpicklable(obj: Any, path: str, out: list[str], seen: set[int], depth: int = 0) -> bool:
    """Record the deepest paths under `obj` that fail to pickle; True if `obj` itself fails."""
    import pickle

    if len(out) >= 10 or depth > 12 or id(obj) in seen:
        return False
    seen.add(id(obj))
    try:
        pickle.dumps(obj)
        return False
    except Exception as e:
        error = f"{type(e).__name__}: {str(e)[:300]}"
    if not any([unpicklable(v, path + k, out, seen, depth + 1) for k, v in _children(obj)]):
        out.append(f"{path} ({type(obj).__name__}): {error}")
    return True


def main() -> None:
    case = sys.argv[1] if len(sys.argv) > 1 else "gpt2_train_amp"
    root = tempfile.mkdtemp()
    os.environ.update(COIL_CACHE_DIR=f"{root}/coil", TORCHINDUCTOR_CACHE_DIR=f"{root}/inductor",
                      TRITON_CACHE_DIR=f"{root}/triton")
    from torch._functorch._aot_autograd.autograd_cache import AOTAutogradCache

    original = AOTAutogradCache._pickle_entry

    def report(entry: Any, error: BaseException | None) -> None:
        found: list[str] = []
        cuda_tensors(entry, "entry", found, set())
        print(f"[probe] entry {type(entry).__name__} did not pickle ({type(error).__name__}: {error}); "
              "CUDA tensors inside:", flush=True)
        for line in found or ["(none found by the walk)"]:
            print("   ", line, flush=True)
        if error is not None:
            import traceback

            for line in traceback.format_exception(error)[-12:]:
                print("    |", line.rstrip()[:300], flush=True)
        bad: list[str] = []
        unpicklable(entry, "entry", bad, set())
        print("[probe] deepest parts that do not pickle:", flush=True)
        for line in bad or ["(the walk found none)"]:
            print("   ", line, flush=True)

    def probe(entry: Any, remote: bool) -> Any:
        try:
            result = original(entry, remote)
        except Exception as e:  # torch 2.11 catches only some types here: report, then re-raise
            report(entry, e)
            raise
        if result is None:
            report(entry, None)
        return result

    AOTAutogradCache._pickle_entry = staticmethod(probe)  # type: ignore[method-assign]
    from coil.backend import bench_models as bm

    spec, kind = bm._split(case)
    model = bm._model(spec)
    inputs = spec.inputs(model)
    compiled = torch.compile(model, backend="coil")
    bm._train_step(spec, compiled, inputs) if kind != "infer_bf16" else bm._infer_step(spec, compiled, inputs)
    torch.cuda.synchronize()
    print("[probe] done", flush=True)


if __name__ == "__main__":
    main()
