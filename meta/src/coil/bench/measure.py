"""How `coil bench` runs and measures one mode: the modes, fresh caches, timing, memory, counts.

- `MODES` and `compile_mode(fn, mode)`: `fn` itself (eager), `torch.compile` default
  (TorchInductor, no CUDA graphs), `torch.compile(mode="reduce-overhead")` (Inductor with CUDA
  graphs), `torch.compile(backend="coil")` (coil's defaults: CUDA graphs on) and coil with CUDA
  graphs off (`COIL_NOCG`). `PEERS` pairs each coil mode with the Inductor mode that makes the
  same choice about CUDA graphs.
- `EXTRA_MODES`, asked for by name (`coil bench --modes`) or by a case's group
  (coil.bench.suite.case_modes): `inductor_max`, `torch.compile(mode="max-autotune-no-cudagraphs")`
  (Inductor choosing among its matmul templates and cuBLAS by benchmarking them), and `coil_max`,
  the same mode with coil (its GEMM templates where timed faster, COIL_MATMUL_TEMPLATES=auto),
  any case;
  `flex`, `torch.compile` of an attention case's FlexAttention form (coil.bench.attention_flex),
  attention cases only. `ALL_MODES`: every mode, in the order reports list them.
- `cold_caches(root, tag)`: empty cache folders for Inductor, Triton and coil, set before the
  compile, in-memory kernel memos cleared; yields the cache environment a new process needs to
  compile again from those caches.
- `do_bench(fn, warmup, rep)`: the median of `triton.testing.do_bench` (CUDA events), in ms;
  `loop_ms(fn, steps)`: wall-clock ms a step over a loop of `steps` calls (launch overhead and
  host work included, which CUDA events between calls hide).
- `baseline()`: the device memory the model and its inputs hold before any compile;
  `warm_peak(fn, base)`: device memory at the peak of one warm call, and its growth over `base`;
  `memory_by_pool()`: what the caching allocator holds per pool.
- `coil_graphs()`, `coil_counts(graphs)`: what coil compiled in this process, and how many
  graphs it compiled, ran eagerly after a compile error, and ATen fallbacks inside them.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from coil.knobs import KNOBS, knobs

MODES = ("eager", "inductor", "inductor_ro", "coil", "coil_nocg")
# modes a run asks for by name or a case's group adds (module docstring)
EXTRA_MODES = ("inductor_max", "flex", "coil_max")
ALL_MODES = ("eager", "inductor", "inductor_ro", "inductor_max", "flex", "coil", "coil_nocg", "coil_max")
# each coil mode and its fair peer: the Inductor mode with the same CUDA-graph choice
PEERS = {"coil": "inductor_ro", "coil_nocg": "inductor"}
# torch.compile(options=...) of the coil_nocg mode: coil's knobs for CUDA graphs, both off
COIL_NOCG = {"cuda_graphs": False, "cuda_graphs_training": False}


def is_coil(mode: str) -> bool:
    """Whether `mode` compiles with coil (coil, coil_nocg)."""
    return mode.startswith("coil")


def compile_mode(fn: Any, mode: str) -> Any:
    """`fn` as run by one bench mode (ALL_MODES): itself (eager), `torch.compile` (inductor, and
    flex: there `fn` is the case's FlexAttention form), `torch.compile(mode="reduce-overhead")`
    (inductor_ro), `torch.compile(mode="max-autotune-no-cudagraphs")` (inductor_max),
    `torch.compile(backend="coil")` (coil), the same with `options=COIL_NOCG` (coil_nocg) or with
    `mode="max-autotune-no-cudagraphs"` (coil_max). ValueError for any other mode."""
    import torch

    if mode == "eager":
        return fn
    if mode in ("inductor", "flex"):
        return torch.compile(fn)
    if mode == "inductor_ro":
        return torch.compile(fn, mode="reduce-overhead")
    if mode == "inductor_max":
        return torch.compile(fn, mode="max-autotune-no-cudagraphs")
    if mode == "coil":
        return torch.compile(fn, backend="coil")
    if mode == "coil_nocg":
        return torch.compile(fn, backend="coil", options=dict(COIL_NOCG))
    if mode == "coil_max":
        return torch.compile(fn, backend="coil", mode="max-autotune-no-cudagraphs")
    raise ValueError(f"unknown bench mode {mode!r}; known: {', '.join(ALL_MODES)}")


def mark_step(mode: str) -> None:
    """What a training loop does before each step under `mode`: Inductor's CUDA-graph trees
    (inductor_ro) are told that a new iteration begins (`torch.compiler.cudagraph_mark_step_begin`),
    so that the previous step's outputs may be overwritten; nothing for the other modes."""
    if mode == "inductor_ro":
        import torch

        torch.compiler.cudagraph_mark_step_begin()  # type: ignore[no-untyped-call]


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


def loop_ms(fn: Callable[[], object], steps: int) -> float:
    """Wall-clock milliseconds a call over a loop of `steps` calls of `fn`, synchronised before
    and after the loop and nowhere inside it: what a user's loop sees, the host's work and the
    launches included."""
    import torch

    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / steps * 1e3


def baseline() -> dict[str, float]:
    """The device memory held now, in MiB, after `empty_cache`: what the model, its gradients (if
    any) and its inputs take before a mode compiles or runs anything (`base_allocated_mib`,
    `base_reserved_mib`). `warm_peak` reports its growth over these."""
    import torch

    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    return {"base_allocated_mib": torch.cuda.memory_allocated() / 2**20,
            "base_reserved_mib": torch.cuda.memory_reserved() / 2**20}


def warm_peak(fn: Callable[[], object], base: Mapping[str, float] | None = None) -> dict[str, Any]:
    """Device memory at the peak of one warm call, in MiB: `peak_mib`, the most the process held
    (`torch.cuda.max_memory_reserved()` over the call, after `torch.cuda.empty_cache()` released
    the allocator's unused cached blocks), and `peak_allocated_mib`, the most allocated to tensors
    (`max_memory_allocated`; the difference is the caching allocator's rounding and
    fragmentation, and the free blocks of CUDA-graph pools).

    Reserved rather than allocated memory, so that CUDA-graph replay is counted like eager
    allocation: a replay allocates nothing; it runs in its pool's memory, reserved (and partly
    allocated to the outputs it hands out) before the call. Both include the model's
    parameters, gradients and inputs, the same in every mode; given `base` (`baseline()` before
    the compile), `growth_allocated_mib` and `growth_reserved_mib` are the peaks over it: what
    the mode needs beyond the model's own. `after_call_by_pool`: `memory_by_pool()` after the call."""
    import torch

    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    r = fn()
    torch.cuda.synchronize()
    out: dict[str, Any] = {"peak_mib": torch.cuda.max_memory_reserved() / 2**20,
                           "peak_allocated_mib": torch.cuda.max_memory_allocated() / 2**20}
    del r
    if base is not None:
        out.update(base)
        out["growth_allocated_mib"] = out["peak_allocated_mib"] - base["base_allocated_mib"]
        out["growth_reserved_mib"] = out["peak_mib"] - base["base_reserved_mib"]
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
             "extern_ops": s.extern_ops, "fallbacks": s.fallbacks, "eager_fallback": s.eager_fallback}
            for s in cb.COMPILED]


def coil_counts(graphs: list[dict[str, Any]]) -> dict[str, int]:
    """From `coil_graphs()`: `graphs_compiled` (graphs coil was given), `graphs_eager` (of those,
    graphs run eagerly after a compile error: `GraphStats.eager_fallback`) and `aten_fallbacks`
    (ATen ops run as fallbacks inside the compiled graphs, counted per graph)."""
    return {"graphs_compiled": len(graphs),
            "graphs_eager": sum(1 for g in graphs if g.get("eager_fallback")),
            "aten_fallbacks": sum(len(g.get("fallbacks") or ()) for g in graphs)}


def live_runners() -> list[Any]:
    """coil's live CUDA-graph runners (`coil.runtime.CudaGraphRunner`, one per graph and call
    site), found among the objects the garbage collector tracks (by exact type: `isinstance`
    would ask every weak proxy and lazy module for its class)."""
    import gc

    from coil.runtime import CudaGraphRunner

    return [o for o in gc.get_objects() if type(o) is CudaGraphRunner]


def runner_lines() -> list[str]:
    """One line per live CUDA-graph runner (`live_runners()`), grouped by memory pool: its position
    in the pool, captured or why not, its inputs (static, borrowed, copied in at each replay), its
    outputs (handed out, over an input's memory, cloned at each replay), what its pool guard
    checks before a replay, the calls it ran uncaptured, the outputs it copied away."""
    lines = []
    for r in sorted(live_runners(), key=lambda r: str(r._pool)):
        copied = _copied_away(r)
        state = ("captured" if r.capture_error is None else f"stopped ({r.capture_error})") if r.graph is not None \
            else f"not captured ({r.capture_error})"
        guard = getattr(r, "_guard", None)
        checks = (f"; checks {len(guard.consumed)} consumed inputs and {sum(len(e) for _, e in guard._exposed)} outputs "
                  f"of {len(guard._exposed)} earlier members" if guard is not None else "")
        shape = (f"inputs {r._n} (static {len(r.static_indices)}, borrowed {len(r.borrowed)}, copied in "
                 f"{len(r._copied_in)}), outputs {len(r._static_outputs)} (handed out "
                 f"{len(r.handouts.slots) if r.handouts is not None else 0}, over inputs {len(r._param_sources)}, "
                 f"cloned {len(r._cloned_idx)}){checks}" if r.graph is not None else f"inputs {r._n}")
        lines.append(f"pool {r._pool} #{getattr(r, '_pool_position', '-')}: {state}; {shape}; uncaptured calls "
                     f"{r.uncaptured_calls}, outputs copied away {copied}")
    return lines


def _copied_away(r: Any) -> int:
    """The output storages runner `r` copied away before a replay because a caller held them."""
    handouts, lazy = getattr(r, "handouts", None), getattr(r, "_lazy", None)
    return (handouts.evacuated if handouts is not None else 0) + (lazy.evacuated if lazy else 0)


def cuda_graph_counts() -> dict[str, int]:
    """Of `live_runners()`: `cuda_graphs` captured and replaying, `cuda_graphs_stopped` not
    captured or no longer replaying (`capture_error`), `uncaptured_calls` the calls they ran
    without their graph (the liveness rule), `outputs_copied_away` the output storages they
    copied away before a replay because a caller still held them (lazy clones, hand-outs),
    `cuda_graph_pools` the memory pools they hold."""
    live = live_runners()
    return {"cuda_graphs": sum(1 for r in live if r.graph is not None and r.capture_error is None),
            "cuda_graphs_stopped": sum(1 for r in live if r.graph is None or r.capture_error is not None),
            "uncaptured_calls": sum(r.uncaptured_calls for r in live),
            "outputs_copied_away": sum(_copied_away(r) for r in live),
            "cuda_graph_pools": len({str(r._pool) for r in live})}


def cuda_graph_stops() -> dict[str, int]:
    """Why `live_runners()` stopped or never captured: each distinct `capture_error` (its type and
    the first 160 characters of its message) and how many runners it stopped."""
    out: dict[str, int] = {}
    for r in live_runners():
        if r.capture_error is not None:
            why = f"{type(r.capture_error).__name__}: {r.capture_error}"[:160]
            out[why] = out.get(why, 0) + 1
    return out


def dynamo_graphs() -> int:
    """How many graphs Dynamo traced in this process since its counters were last cleared
    (`torch._dynamo.utils.counters`): one per graph break plus one."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])
