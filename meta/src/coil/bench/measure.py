"""How `coil bench` runs and measures one mode: the modes, fresh caches, timing, peak memory.

- `MODES` and `compile_mode(fn, mode)`: `fn` itself (eager), `torch.compile` (TorchInductor) or
  `torch.compile(backend="coil")`.
- `cold_caches(root, tag)`: empty cache folders for Inductor, Triton and coil, set before the
  compile, in-memory kernel memos cleared; yields the cache environment a new process needs to
  compile again from those caches.
- `do_bench(fn, warmup, rep)`: the median of `triton.testing.do_bench` (CUDA events), in ms.
- `warm_peak(fn)`: device memory at the peak of one warm call (`torch.cuda.max_memory_reserved`
  over the call after `empty_cache`; CUDA-graph pools are reserved memory too), and
  `memory_by_pool()`: what the caching allocator holds per pool.
- `coil_graphs()`: what coil compiled in this process (kernels, fallbacks, eager graphs).
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from coil.knobs import KNOBS, knobs

MODES = ("eager", "inductor", "coil")


def compile_mode(fn: Any, mode: str) -> Any:
    """`fn` as run by one bench mode: itself (eager), `torch.compile` (Inductor) or coil."""
    import torch

    if mode == "eager":
        return fn
    if mode == "inductor":
        return torch.compile(fn)
    return torch.compile(fn, backend="coil")


@contextlib.contextmanager
def cold_caches(root: Path, tag: str) -> Iterator[dict[str, str]]:
    """Fresh, empty caches for Inductor, Triton and coil: env set before the compile, memos cleared.

    Yields the cache environment, so that a new process can compile again with warm caches."""
    import torch

    d = Path(tempfile.mkdtemp(prefix=f"{tag}-", dir=root))
    folders = {"inductor_cache_dir": d / "inductor", "triton_cache_dir": d / "triton", "cache_dir": d / "coil"}
    env = {KNOBS[name].env: str(path) for name, path in folders.items()}
    knobs.export(**folders)
    torch._dynamo.reset()
    with contextlib.suppress(Exception):
        from coil.runtime.compile import clear_memo

        clear_memo()
    import torch._inductor.utils as iu

    fresh = getattr(iu, "fresh_cache", None) or getattr(iu, "fresh_inductor_cache", None)
    cm: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
    if fresh is not None:
        try:
            cm = fresh(dir=str(d), delete=False)
        except TypeError:
            cm = contextlib.nullcontext()
    with cm:
        # Inductor's fresh_cache points TORCHINDUCTOR_CACHE_DIR and TRITON_CACHE_DIR at a folder of
        # its own: the warm process must get the folders the cold compile actually filled
        now = knobs.environ()
        yield {k: now.get(k, v) for k, v in env.items()}


def do_bench(fn: Callable[[], object], warmup: int, rep: int) -> float:
    """Milliseconds of one call of `fn`: the median of `triton.testing.do_bench` (CUDA events)."""
    import triton

    return float(triton.testing.do_bench(fn, warmup=warmup, rep=rep, return_mode="median"))


def warm_peak(fn: Callable[[], object]) -> dict[str, Any]:
    """Device memory at the peak of one warm call, in MiB: `peak_mib`, the most the process held
    (`torch.cuda.max_memory_reserved()` over the call, after `torch.cuda.empty_cache()` released
    the allocator's unused cached blocks), and `peak_allocated_mib`, the most allocated to tensors
    (`max_memory_allocated`; the difference is the caching allocator's rounding and
    fragmentation, and the free blocks of CUDA-graph pools).

    Reserved rather than allocated memory, and absolute rather than above a baseline, so that
    CUDA-graph replay is counted like eager allocation: a replay allocates nothing; it runs in
    its pool's memory, reserved (and partly allocated to the outputs it hands out) before the
    call. Both include the model's parameters, gradients and inputs, the same in every mode.
    `after_call_by_pool`: `memory_by_pool()` after the call."""
    import torch

    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    r = fn()
    torch.cuda.synchronize()
    out: dict[str, Any] = {"peak_mib": torch.cuda.max_memory_reserved() / 2**20,
                           "peak_allocated_mib": torch.cuda.max_memory_allocated() / 2**20}
    del r
    out["after_call_by_pool"] = memory_by_pool()
    return out


def memory_by_pool() -> dict[str, dict[str, float]]:
    """What the caching allocator holds now, per memory pool (its snapshot's `segment_pool_id`:
    "(0, 0)" is the ordinary allocator, any other a CUDA-graph pool): reserved and allocated MiB
    and the number of segments. Where a warm peak goes, without a profiler."""
    import torch

    out: dict[str, dict[str, float]] = {}
    for seg in torch.cuda.memory_snapshot():  # type: ignore[no-untyped-call]
        key = str(tuple(seg.get("segment_pool_id", (0, 0))))
        d = out.setdefault(key, {"reserved_mib": 0.0, "allocated_mib": 0.0, "segments": 0})
        d["reserved_mib"] += seg["total_size"] / 2**20
        d["allocated_mib"] += seg["allocated_size"] / 2**20
        d["segments"] += 1
    return out


def coil_graphs() -> list[dict[str, Any]]:
    """What coil compiled in this process (`coil.backend.COMPILED`), one dict a graph."""
    import coil.backend as cb

    return [{"name": s.name, "kernels": s.kernels, "ir_ops": s.ir_ops, "externs": s.externs,
             "fallbacks": s.fallbacks, "eager_fallback": s.eager_fallback} for s in cb.COMPILED]
