"""Where coil's compile time goes: HF GPT-2 compiled with backend="coil", time per stage.

    python bench/compile_profile.py [--mode infer|train|both] [--layers N] [--seq N]
                                    [--cprofile N] [--cprofile-dump PATH] [--json PATH]
    python bench/compile_profile.py --case CASE [--compiler coil|inductor] [--json PATH] [--stacks S]

Default: `GPT2LMHeadModel(GPT2Config(n_layer=N, attn_implementation="eager"))` (random weights,
fp32, batch 1 x seq tokens; on CUDA when available, else on the CPU with kernels in Triton's
interpreter), compiled with `torch.compile(model, backend="coil")`; the first call is timed:
inference under `torch.no_grad()`, or a training step (forward, `loss.backward()`).
`--case` takes a `coil bench` model case instead (e.g. gpt2_infer_bf16, gpt2_train_amp,
bert_base_infer_bf16: CUDA, the bench's batch, dtype and step; coil.bench.models), and
`--compiler inductor` compiles with `torch.compile`'s default for comparison. Prints:

- first call (from `torch.compile` to the end of the first run, as `coil bench` counts it) and
  a second call (run only): wall seconds and this process's CPU seconds (all threads; steadier
  than wall time on a shared machine);
- Dynamo capture (Dynamo's own time, without the backend call), coil's frontend cache (its key
  and reading its entry, COIL_FRONTEND_CACHE; on a hit nothing else of the backend runs but the
  loading of the graph, counted in its stages), coil's pre-grad passes, and
  AOTAutograd (tracing + partitioning, without coil's compile of the graphs it hands over; on
  a hit in torch's AOTAutograd cache, COIL_AOT_CACHE, its key and the rebuilding of its runtime
  wrappers), with the AOT-cache verdict of each backend call (hit, miss, bypass, off);
- per coil stage, summed over the graphs (GraphStats.stage_times): graph cache, post-grad
  passes, lowering, scheduling (split into fusion and memory-planner ordering), triton
  codegen, wrapper codegen, runtime compile (kernel disk cache and Triton's compile; ~0 under
  the interpreter), load (exec of the wrapper module);
- what autotuning bought: the problems tuned (timed now), grouped by the bytes a launch reads and
  writes (sum over its buffers), with the kernels each serves (a kernel repeated in every layer
  is one problem), the wall time their tuning took (compiling excluded) and the time a step
  their choices save over the defaults (`--json` keeps each problem);
- with `--cprofile N`, the top N of coil's own functions by cumulative and by own time (under
  cProfile, which slows Python ~1.5-2x: take stage times from a run without it);
- with `--stacks S`, the main thread's Python stack (its innermost 30 frames) on stderr every S
  seconds while it runs: a compile that does not finish shows where it is;
- with `--cprofile-dump PATH`, the first call's whole profile (torch's functions too: what a
  warm start spends outside coil) written as a pstats file, for `python -m pstats PATH`.

Caches: the environment decides (COIL_CACHE_DIR, COIL_GRAPH_CACHE, COIL_AOT_CACHE; TRITON_CACHE_DIR,
and TORCHINDUCTOR_CACHE_DIR for Triton, Inductor and the AOTAutograd cache). For a cold compile point them at empty
folders; run again with the same folders, in a new process, for a warm one. `--json PATH`
writes every figure. docs/perf.md (compile time) has the measurements and how they were made.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch


def _model(layers: int, device: torch.device) -> Any:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    kwargs: dict[str, Any] = {"n_layer": layers, "attn_implementation": "eager"}
    model: Any = GPT2LMHeadModel(GPT2Config(**kwargs))
    return model.to(device)


_runs = 0  # runs made in this process (`run`)


@contextmanager
def _tuned_problems(records: list[dict[str, Any]]) -> Iterator[None]:
    """Record each problem autotuning times (`coil.runtime.autotune._tune_one`): its kernel, bytes
    a launch touches, candidates, tuning wall time (checks and timing; compiling is before),
    each candidate's time and the choice; and `kernels`, how many of the compiled graphs'
    kernels took that result (`_tune_all`: the same code under other names, e.g. one per layer,
    is tuned once and taken from the memo by the others)."""
    import coil.runtime.autotune as at
    from coil.runtime.spec import TensorArg

    tune_one, tune_all = at._tune_one, at._tune_all
    by_key: dict[str, dict[str, Any]] = {}

    def one(problem: Any, kernels: Any, device: Any) -> Any:
        t0 = time.perf_counter()
        result = tune_one(problem, kernels, device)
        tensors = [a for a in problem.candidates[0].spec.args if isinstance(a, TensorArg)]
        record = {
            "kernel": problem.name, "bytes": sum(n * a.dtype.itemsize for n, a in zip(problem.numels, tensors, strict=True)),
            "candidates": len(problem.candidates), "tune_s": time.perf_counter() - t0,
            "times_ms": list(result.times_ms), "choice": result.choice, "origin": result.origin,
            "configs": [c.describe() for c in problem.candidates], "kernels": 1}
        records.append(record)
        by_key[at.problem_key(problem, device)] = record
        return result

    def all_(problems: Any, device: Any) -> Any:
        results = tune_all(problems, device)
        for problem, result in zip(problems, results, strict=True):
            if result.origin == "memo":
                record = by_key.get(at.problem_key(problem, device))
                if record is not None:
                    record["kernels"] += 1
        return results

    at._tune_one, at._tune_all = one, all_
    try:
        yield
    finally:
        at._tune_one, at._tune_all = tune_one, tune_all


def _tuning_summary(records: list[dict[str, Any]]) -> list[str]:
    """Lines: per bytes bucket, problems, the kernels they serve, switched from the default,
    tuning seconds, and the milliseconds a step saves (default's time less the chosen one's,
    times the kernels served, summed: each kernel launched once a step)."""
    bounds = [(0, 1 << 20, "< 1 MiB"), (1 << 20, 8 << 20, "1-8 MiB"), (8 << 20, 64 << 20, "8-64 MiB"),
              (64 << 20, 1 << 62, ">= 64 MiB")]
    lines = []
    for low, high, label in bounds:
        rows = [r for r in records if r["origin"] == "tuned" and low <= r["bytes"] < high]
        if not rows:
            continue
        switched = sum(r["choice"] != 0 for r in rows)
        tune = sum(r["tune_s"] for r in rows)
        default_ms = sum((r["times_ms"][0] or 0.0) * r["kernels"] for r in rows)
        saved = sum(((r["times_ms"][0] or 0.0) - (r["times_ms"][r["choice"]] or 0.0)) * r["kernels"] for r in rows)
        cands = sum(r["candidates"] for r in rows)
        kernels = sum(r["kernels"] for r in rows)
        lines.append(f"  {label:<10} {len(rows):4d} problems ({kernels} kernels), {cands:5d} candidates, "
                     f"{switched:4d} switched, tuning {tune:6.2f} s, default {default_ms:8.3f} ms, "
                     f"saved {saved:7.3f} ms a step")
    return lines


@contextmanager
def _timed_parts(times: dict[str, float]) -> Iterator[None]:
    """Time parts of two stages by wrapping functions where their callers look them up: the
    scheduler's fusion and memory-planner ordering (`coil.scheduler.schedule`), and autotuning's
    compile of the candidates, the synthetic arguments, and the timing of each candidate
    (`coil.runtime.autotune`, `coil.runtime.timing`)."""
    import importlib

    import coil.runtime.autotune
    import coil.runtime.timing

    # imported by name: the package attribute `coil.scheduler.schedule` is the function
    sched_mod = importlib.import_module("coil.scheduler.schedule")
    targets = [(sched_mod, "fuse", "fusion"), (sched_mod, "order_steps", "ordering"),
               (coil.runtime.autotune, "compile_variants", "autotune: compile candidates"),
               (coil.runtime.autotune, "make_arguments", "autotune: synthetic arguments"),
               (coil.runtime.timing, "measure", "autotune: timing")]
    saved = [(mod, name, getattr(mod, name)) for mod, name, _ in targets]

    def wrap(label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                times[label] = times.get(label, 0.0) + time.perf_counter() - t0
        return timed

    for (mod, name, label), (_, _, fn) in zip(targets, saved, strict=True):
        setattr(mod, name, wrap(label, fn))
    try:
        yield
    finally:
        for mod, name, fn in saved:
            setattr(mod, name, fn)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _gpt2_step(mode: str, layers: int, seq: int, device: torch.device) -> tuple[Any, Callable[[Any], None]]:
    """The default model and its step (see the module docstring)."""
    model = _model(layers, device)
    ids = torch.randint(0, model.config.vocab_size, (1, seq), device=device)
    if mode == "infer":
        model.eval()

    def step(m: Any) -> None:
        if mode == "infer":
            with torch.no_grad():
                m(ids)
        else:
            m(ids, labels=ids).loss.backward()
    return model, step


def _case_step(case: str) -> tuple[Any, Callable[[Any], None]]:
    """A `coil bench` model case's model and step (coil.bench.models)."""
    from coil.bench import models as bm

    return bm.load(case)


def run(mode: str, layers: int, seq: int, profile: int, case: str | None = None,
        compiler: str = "coil", dump: Path | None = None) -> dict[str, Any]:
    """Compile and time one mode (infer or train) or bench case in this process; returns the figures."""
    import coil.backend
    from coil.backend.stats import BACKEND_CALLS, COMPILED, stage_totals
    from torch._dynamo.utils import compilation_time_metrics

    device = torch.device("cuda" if torch.cuda.is_available() or case else "cpu")
    model, model_step = _case_step(case) if case else _gpt2_step(mode, layers, seq, device)
    global _runs
    # only between two runs of one process: torch._dynamo.reset() imports ~140 modules
    # (Inductor's codegen among them) that a process's first compile otherwise imports inside
    # the clock, as `coil bench`'s first calls do
    if _runs:
        torch._dynamo.reset()
    _runs += 1
    coil.backend.reset()
    compilation_time_metrics.clear()
    compiled: Any = None

    def step() -> None:
        model_step(compiled)
        _sync(device)

    sched_times: dict[str, float] = {}
    tuned: list[dict[str, Any]] = []
    prof = cProfile.Profile() if profile or dump else None
    with _timed_parts(sched_times), _tuned_problems(tuned):
        # the clock starts before torch.compile, as `coil bench`'s does: Inductor imports its
        # compiler there
        t0, c0 = time.perf_counter(), time.process_time()
        if prof is not None:
            prof.enable()
        compiled = torch.compile(model, backend="coil") if compiler == "coil" else torch.compile(model)
        step()
        if prof is not None:
            prof.disable()
        first, first_cpu = time.perf_counter() - t0, time.process_time() - c0
    t0, c0 = time.perf_counter(), time.process_time()
    step()
    second, second_cpu = time.perf_counter() - t0, time.process_time() - c0

    dynamo_total = sum(compilation_time_metrics.get("_compile.compile_inner", []))
    backend_total = sum(compilation_time_metrics.get("OutputGraph.call_user_compiler", []))
    pre_grad = sum(c.pre_grad_s for c in BACKEND_CALLS)
    # a frontend-cache hit calls no AOTAutograd: its graph's loading is within the call's frontend_s
    hits = [c for c in BACKEND_CALLS if getattr(c, "frontend_cache", "off") == "hit"]
    in_aot = {g for c in BACKEND_CALLS if c not in hits for g in c.graphs}
    in_front = {g for c in hits for g in c.graphs}  # (a lazily compiled backward is in neither)
    aot = sum(c.aot_s for c in BACKEND_CALLS if c not in hits) - sum(s.compile_s for s in COMPILED if s.name in in_aot)
    front = sum(getattr(c, "frontend_s", 0.0) for c in BACKEND_CALLS)
    front -= sum(s.compile_s for s in COMPILED if s.name in in_front)
    stages = stage_totals(COMPILED)
    res: dict[str, Any] = {
        "mode": mode, "layers": layers, "seq": seq, "case": case, "compiler": compiler,
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "torch": torch.__version__, "first_call_s": first, "second_call_s": second,
        "first_call_cpu_s": first_cpu, "second_call_cpu_s": second_cpu,
        "dynamo_capture_s": dynamo_total - backend_total, "pre_grad_s": pre_grad, "aot_autograd_s": aot,
        "frontend_cache_s": front,
        "frontend_cache": [getattr(c, "frontend_cache", "n/a") for c in BACKEND_CALLS],
        "coil_stages_s": stages, "scheduler_parts_s": sched_times,
        "aot_cache": [getattr(c, "aot_cache", "n/a") for c in BACKEND_CALLS],
        "graphs": [{"name": s.name, "fx_nodes": s.fx_nodes, "kernels": s.kernels, "graph_cache": getattr(s, "graph_cache", "n/a"),
                    "aot_cache": getattr(s, "aot_cache", "n/a"), "stage_times": s.stage_times} for s in COMPILED],
        "autotune_problems": tuned,
    }
    _print(res)
    if prof is not None and profile:
        _print_profile(prof, profile)
    if prof is not None and dump is not None:
        prof.dump_stats(dump)
    return res


def _print(r: dict[str, Any]) -> None:
    what = r["case"] or f"GPT-2 {r['layers']} layers, batch 1 x {r['seq']}, {r['mode']}"
    print(f"\n== {what}, {r['compiler']}, {r['device']}, torch {r['torch']}")
    print(f"first call (compile + run) {r['first_call_s']:.2f} s ({r['first_call_cpu_s']:.2f} s CPU); "
          f"second call (run) {r['second_call_s']:.2f} s ({r['second_call_cpu_s']:.2f} s CPU)")
    print(f"  Dynamo capture (without backend)   {r['dynamo_capture_s']:7.2f} s")
    print(f"  frontend cache (key, read)         {r['frontend_cache_s']:7.2f} s  "
          f"(frontend cache: {', '.join(r['frontend_cache'])})")
    print(f"  pre-grad passes                    {r['pre_grad_s']:7.2f} s")
    print(f"  AOTAutograd (without coil compile) {r['aot_autograd_s']:7.2f} s  (AOT cache: {', '.join(r['aot_cache'])})")
    for stage, t in r["coil_stages_s"].items():
        print(f"  {stage:<34} {t:7.2f} s")
        for part, tp in r["scheduler_parts_s"].items():
            if part.startswith("autotune") == (stage == "autotune") and stage in ("scheduling", "autotune"):
                print(f"    {part:<32} {tp:7.2f} s")
    total = sum(r["coil_stages_s"].values())
    print(f"  coil stages total                  {total:7.2f} s")
    for g in r["graphs"]:
        print(f"  graph {g['name']}: {g['fx_nodes']} FX nodes, {g['kernels']} kernels, graph cache {g['graph_cache']}, AOT cache {g['aot_cache']}, "
              f"{sum(g['stage_times'].values()):.2f} s")
    if r["autotune_problems"]:
        print("  autotuning, problems timed now, by bytes a launch touches:")
        for line in _tuning_summary(r["autotune_problems"]):
            print(line)


def _print_profile(prof: cProfile.Profile, top: int) -> None:
    st = pstats.Stats(prof)
    raw: dict[Any, Any] = st.stats  # type: ignore[attr-defined]
    rows = [(k, v) for k, v in raw.items() if "/coil/" in k[0]]
    for label, idx in (("cumulative", 3), ("own", 2)):
        print(f"\ncProfile, coil functions by {label} time (top {top}):")
        print(f"{'cum s':>8} {'own s':>8} {'calls':>9}  function")
        for (file, line, fn), v in sorted(rows, key=lambda kv: -kv[1][idx])[:top]:
            short = file.split("/coil/", 1)[1]
            print(f"{v[3]:8.2f} {v[2]:8.2f} {v[1]:9d}  {short}:{line} {fn}")


def _sample_stacks(every_s: float, frames: int = 30) -> None:
    """Print the calling thread's innermost `frames` frames on stderr every `every_s` seconds, from
    a daemon thread (sys._current_frames under the GIL: faulthandler's dump can crash inside
    Dynamo's frame evaluation)."""
    main_id = threading.get_ident()
    start = time.perf_counter()

    def sample() -> None:
        while True:
            time.sleep(every_s)
            frame = sys._current_frames().get(main_id)
            if frame is None:
                return
            stack = "".join(traceback.format_stack(frame)[-frames:])
            print(f"--- main thread at {time.perf_counter() - start:.0f} s:\n{stack}", file=sys.stderr, flush=True)

    threading.Thread(target=sample, name="stack-sampler", daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mode", choices=("infer", "train", "both"), default="both")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--cprofile", type=int, default=0, metavar="N", help="print the top N coil functions")
    ap.add_argument("--cprofile-dump", type=Path, default=None, metavar="PATH",
                    help="write the first call's whole cProfile (pstats) to PATH")
    ap.add_argument("--case", default=None, help="a coil bench model case (CUDA), e.g. gpt2_train_amp")
    ap.add_argument("--compiler", choices=("coil", "inductor"), default="coil")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--stacks", type=float, default=0.0, metavar="S",
                    help="print the main thread's stack on stderr every S seconds")
    a = ap.parse_args(argv)
    if a.stacks > 0:
        _sample_stacks(a.stacks)
    modes = ("infer", "train") if a.mode == "both" else (a.mode,)
    if a.case:
        results = [run(a.case, a.layers, a.seq, a.cprofile, a.case, a.compiler, a.cprofile_dump)]
    else:
        if a.cprofile_dump is not None and len(modes) > 1:
            ap.error("--cprofile-dump takes one mode (--mode infer or --mode train)")
        results = [run(m, a.layers, a.seq, a.cprofile, None, a.compiler, a.cprofile_dump) for m in modes]
    if a.json is not None:
        a.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
