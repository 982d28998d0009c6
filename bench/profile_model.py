"""Where the GPU time goes: Inductor vs coil on one model, kernel by kernel (torch.profiler).

    python bench/profile_model.py OUT_DIR CASE [--top N] [--only MODE[,MODE...]] [--cprofile N] [--host N]
                                  [--callees REGEX] [--runners] [--replay-split] [--log LOGGER[,LOGGER...]]
        (CASE: a `coil bench` model case, e.g. gpt2_infer_bf16, bert_base_train_amp, or a GEMM or
         attention case, e.g. gemm_small_batch_16x4096x4096 (bf16);
         MODE: a `coil bench` mode; default inductor,coil)

For each mode: compile, warm up, profile 5 iterations; prints per-iteration wall time (20 steps,
synchronised at the end), the host's issue time (the same steps' Python return times: near the wall
time when the step is host-bound), the wall time of 20 more with Python's garbage collector off,
the median of `triton.testing.do_bench`, the collector's work a step (collections and time by
generation), the number of kernel launches and their summed GPU time, the top kernels by GPU
time, and the CUDA runtime and driver calls a step with their host time (launches, memsets,
allocations, stream queries: what a host-bound step pays for beside Python). With
--cprofile N it also runs 10 warm iterations under cProfile and prints the top N functions by
own time (host overhead between launches: where a launch-bound step spends its CPU time); with
--host N, the top N ATen operators by host (CPU) time per iteration, their own and with what they
call (torch.profiler's CPU activity: what an extern call does on the host). With
--debug-dir the coil runs also write their debug folders (COIL_DEBUG_DIR) under OUT_DIR. With
--runners, coil's runtime logs at INFO (why a call ran without its CUDA graph, copies made before
a replay), and after the iterations each live CUDA-graph runner prints one line: captured or not,
its uncaptured calls, the outputs it copied away before a replay, and its memory pool. With --log,
those loggers log at INFO too (coil.backend: the GEMM templates' timings against their ATen calls). With
--replay-split, coil's modes also run 30 warm steps with wall-clock timers around the CUDA-graph
runtime's entry points (REPLAY_PATH: a call site's call, and inside it the site's key, the
runner's checks, stream order, input copies and table, the graph's replay and the hand-outs),
printed as milliseconds a step and microseconds a call: where the host time of a host-bound step
goes, in plain Python time (no profiler's overhead); `inductor_ro` the same around its cudagraph
trees' entry points (INDUCTOR_REPLAY_PATH).
"""

from __future__ import annotations

import cProfile
import gc
import importlib
import io
import pstats
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from coil.bench.measure import compile_mode, do_bench, is_coil, loop_ms, runner_lines
from coil.knobs import knobs
from torch.profiler import ProfilerActivity, profile

ITERS = 5
# the CUDA-graph runtime's replay path, outermost first: (module, class or "" for a module's
# function, attribute); a function is timed where the runner calls it (the importing module)
REPLAY_PATH = (("coil.runtime.call_sites", "_CallSites", "__call__"), ("coil.runtime.call_sites", "_CallSites", "_site"),
               ("coil.runtime.cudagraph", "CudaGraphRunner", "_replay_blocker"),
               ("coil.runtime.cudagraph", "CudaGraphRunner", "_outputs_in_use"),
               ("coil.runtime.graph_pools", "PoolGuard", "conflict"),
               ("coil.runtime.cudagraph", "", "after_last_replay"),
               ("coil.runtime.cudagraph", "CudaGraphRunner", "_copy_inputs_in"),
               ("coil.runtime.cudagraph", "CudaGraphRunner", "_prepare_table"),
               ("torch.cuda.graphs", "CUDAGraph", "replay"),
               ("coil.runtime.cudagraph", "CudaGraphRunner", "_replayed_outputs"),
               ("coil.runtime.handouts", "Handouts", "replayed"))
# the same for Inductor's cudagraph trees (`reduce-overhead`), to set coil's parts beside; an
# entry this torch lacks is skipped
_TREES = "torch._inductor.cudagraph_trees"
INDUCTOR_REPLAY_PATH = ((_TREES, "CUDAGraphTreeManager", "run"), (_TREES, "CUDAGraphTreeManager", "execute_node"),
                        (_TREES, "CUDAGraphTreeManager", "try_end_curr_execution"),
                        (_TREES, "CUDAGraphNode", "check_invariants"), (_TREES, "CUDAGraphNode", "run"),
                        (_TREES, "CUDAGraphNode", "_copy_inputs_and_remove_from_src"),
                        ("torch.cuda.graphs", "CUDAGraph", "replay"),
                        (_TREES, "CUDAGraphNode", "reconstruct_outputs"))


def _model(case: str) -> tuple[Any, Any]:
    """The model of a `coil bench` case and its step function: a model case's (coil.bench.models),
    or a GEMM or attention case's function with its arguments made at the case's size on the GPU
    (coil.bench.kernel_case; a forward and backward case with a fixed random output gradient)."""
    from coil.bench import kernel_case
    from coil.bench import models as bm
    from coil.bench.suite import kernel_cases

    kc = kernel_cases().get(case)
    if kc is None:
        return bm.load(case)
    dtype = torch.bfloat16
    args = kc.make(kc.dims, "cuda", dtype)
    grad_out = None
    if kc.grad:
        args = tuple(a.requires_grad_() if i in kc.grad else a for i, a in enumerate(args))
        with torch.no_grad():
            grad_out = torch.randn_like(kc.fn(*args))

    def run(fn: Any) -> Any:
        if kc.grad:
            return kernel_case.step(kc, fn, args, grad_out)()
        with torch.no_grad():
            return kernel_case.step(kc, fn, args)()

    return kc.fn, run


class GcTime:
    """Python's cyclic garbage collector while installed (`gc.callbacks`): collections and seconds
    by generation."""

    def __init__(self) -> None:
        self.count = [0, 0, 0]
        self.spent = [0.0, 0.0, 0.0]
        self._t0 = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
        else:
            self.count[info["generation"]] += 1
            self.spent[info["generation"]] += time.perf_counter() - self._t0

    def text(self, steps: int) -> str:
        return ", ".join(f"gen{g} {self.count[g] / steps:.2f}x {self.spent[g] / steps * 1e3:.2f} ms" for g in range(3))


def _loop(step: Any, model: Any, steps: int) -> tuple[float, float]:
    """(host issue, wall) milliseconds a step over `steps` steps: `measure.loop_ms`, with the time
    the host took to issue them too."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        step(model)
    issued = (time.perf_counter() - t0) / steps * 1e3
    torch.cuda.synchronize()
    return issued, (time.perf_counter() - t0) / steps * 1e3


def profile_one(name: str, step: Any, model: Any, out: Path, top: int) -> None:
    for _ in range(3):
        step(model)
    collector = GcTime()
    gc.callbacks.append(collector)
    try:
        issued, wall = _loop(step, model, 20)
    finally:
        gc.callbacks.remove(collector)
    gc.disable()
    try:
        wall_nogc = loop_ms(lambda: step(model), 20)
    finally:
        gc.enable()
    bench = do_bench(lambda: step(model), warmup=25, rep=100)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(ITERS):
            step(model)
        torch.cuda.synchronize()
    averages = prof.key_averages()
    evs = [e for e in averages if e.device_time_total > 0]
    launches = sum(e.count for e in evs) / ITERS
    gpu = sum(e.self_device_time_total for e in evs) / ITERS / 1e3
    print(f"\n=== {name}: wall {wall:.2f} ms/iter (host issue {issued:.2f}, do_bench {bench:.2f}, collector off "
          f"{wall_nogc:.2f}), {launches:.0f} kernels/iter, GPU busy {gpu:.2f} ms/iter\n    garbage collector a step: "
          f"{collector.text(20)}")
    evs.sort(key=lambda e: -e.self_device_time_total)
    for e in evs[:top]:
        print(f"{e.self_device_time_total / ITERS / 1e3:8.3f} ms {e.count // ITERS:4d}x  {e.key[:110]}")
    api = sorted((e for e in averages if e.device_time_total == 0 and e.key.startswith("cu")),
                 key=lambda e: -e.self_cpu_time_total)
    print("    CUDA runtime and driver calls a step (host): " + ", ".join(
        f"{e.key} {e.count // ITERS}x {e.self_cpu_time_total / ITERS / 1e3:.2f} ms" for e in api[:12]))
    (out / f"{name}.txt").write_text(averages.table(sort_by="self_device_time_total", row_limit=200))


def host_one(name: str, step: Any, model: Any, top: int) -> None:
    """5 warm iterations with torch.profiler's CPU activity: ATen operators by host time."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(ITERS):
            step(model)
        torch.cuda.synchronize()
    evs = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
    print(f"\n=== {name}: host time per iteration by operator (own / with callees, calls)")
    for e in evs[:top]:
        print(f"{e.self_cpu_time_total / ITERS / 1e3:8.3f} ms {e.cpu_time_total / ITERS / 1e3:8.3f} ms "
              f"{e.count // ITERS:5d}x  {e.key[:100]}")


def cprofile_one(name: str, step: Any, model: Any, out: Path, top: int, callees: str) -> None:
    """10 warm iterations under cProfile: the top functions by own time, per iteration; with
    `callees`, what the functions matching that regular expression call."""
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(10):
        step(model)
    torch.cuda.synchronize()
    prof.disable()
    buf = io.StringIO()
    stats = pstats.Stats(prof, stream=buf)
    stats.sort_stats("tottime").print_stats(top)
    if callees:
        stats.print_callees(callees)
    print(f"\n=== {name}: cProfile of 10 warm iterations (times are totals over the 10)")
    print(buf.getvalue())
    stats.dump_stats(str(out / f"{name}.pstats"))


def _timed(fn: Callable[..., Any], key: str, spent: dict[str, float], calls: Counter[str]) -> Callable[..., Any]:
    def timed(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[key] += time.perf_counter() - t0
            calls[key] += 1
    return timed


def replay_split(name: str, step: Any, model: Any, path: tuple[tuple[str, str, str], ...], steps: int = 30) -> None:
    """`steps` warm steps with wall-clock timers around `path`'s methods (patched for these steps
    only): each method's milliseconds a step and microseconds a call; the timers nest."""
    spent: dict[str, float] = defaultdict(float)
    calls: Counter[str] = Counter()
    saved = []
    keys = []
    for mod, cls, meth in path:
        module = importlib.import_module(mod)
        owner = getattr(module, cls) if cls else module
        if not hasattr(owner, meth):  # an entry point this torch lacks
            continue
        key = f"{cls or mod}.{meth}"
        keys.append(key)
        saved.append((owner, meth, getattr(owner, meth)))
        setattr(owner, meth, _timed(getattr(owner, meth), key, spent, calls))
    try:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(steps):
            step(model)
        torch.cuda.synchronize()
        wall = (time.perf_counter() - t0) / steps * 1e3
    finally:
        for owner, meth, fn in saved:
            setattr(owner, meth, fn)
    print(f"\n=== {name}: replay path, {wall:.2f} ms a step over {steps} steps")
    for key in keys:
        n = calls[key] / steps
        per = spent[key] / calls[key] * 1e6 if calls[key] else 0.0
        print(f"  {key:48s} {spent[key] / steps * 1e3:7.2f} ms a step, {n:5.0f} calls, {per:7.1f} us a call")


def runners_report(name: str) -> None:
    """One line per live CUDA-graph runner (coil.runtime.CudaGraphRunner), grouped by pool."""
    lines = runner_lines()
    print(f"\n=== {name}: {len(lines)} CUDA-graph runners")
    for line in lines:
        print(f"  {line}")


def main() -> None:
    out = Path(sys.argv[1])
    kind = sys.argv[2] if len(sys.argv) > 2 else "gpt2_infer_bf16"
    top = int(sys.argv[sys.argv.index("--top") + 1]) if "--top" in sys.argv else 30
    out.mkdir(parents=True, exist_ok=True)
    model, step = _model(kind)
    only = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else "inductor,coil"
    cprof = int(sys.argv[sys.argv.index("--cprofile") + 1]) if "--cprofile" in sys.argv else 0
    host = int(sys.argv[sys.argv.index("--host") + 1]) if "--host" in sys.argv else 0
    callees = sys.argv[sys.argv.index("--callees") + 1] if "--callees" in sys.argv else ""
    loggers = ["coil.runtime"] if "--runners" in sys.argv else []
    if "--log" in sys.argv:
        loggers += sys.argv[sys.argv.index("--log") + 1].split(",")
    if loggers:
        import logging

        logging.basicConfig(format="%(name)s %(levelname)s: %(message)s")
        for name in loggers:
            logging.getLogger(name).setLevel(logging.INFO)
    for comp in only.split(","):
        torch._dynamo.reset()
        debug = str(out / f"{kind}-{comp}-debug") if is_coil(comp) and "--debug-dir" in sys.argv else ""
        cm = compile_mode(model, comp)
        t0 = time.perf_counter()
        with knobs.override(debug_dir=debug):  # the first call compiles
            step(cm)
        torch.cuda.synchronize()
        print(f"{comp}: first call {time.perf_counter() - t0:.1f} s")
        profile_one(f"{kind}-{comp}", step, cm, out, top)
        if cprof:
            cprofile_one(f"{kind}-{comp}", step, cm, out, cprof, callees)
        if host:
            host_one(f"{kind}-{comp}", step, cm, host)
        if "--replay-split" in sys.argv and (is_coil(comp) or comp.endswith("_ro")):
            replay_split(f"{kind}-{comp}", step, cm, REPLAY_PATH if is_coil(comp) else INDUCTOR_REPLAY_PATH)
        if "--runners" in sys.argv and is_coil(comp):
            runners_report(f"{kind}-{comp}")


if __name__ == "__main__":
    main()
