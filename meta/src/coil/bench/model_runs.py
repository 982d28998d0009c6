"""One model case of `coil bench` in every mode, and the new processes its first calls run in.

`run_model(case, cold, modes)` measures a case (coil.bench.models) in each mode in turn, each mode
first freeing what the one before left (its model, gradients and Dynamo code). The cold and the
warm first call are each measured in a new process (`new_process_first_call`): empty cache
folders, then the folders the cold one filled, the warm one in `warm_runs()` processes (default
3, `coil bench --warm-runs`) whose median is reported (`warm_median`); the bench's own process
then compiles from those caches for the timings, memory and accuracy. With `coil bench
--precompile` both processes of every mode (Inductor's too) run under torch's caching precompile
(TORCH_CACHING_PRECOMPILE=1): the cold one saves Dynamo's package after its step
(`torch.compiler.save_cache_artifacts`, not timed), and the warm one loads it, skipping Dynamo's
tracing where torch can package the model. The bench's own process does not use it. The
references and the model's master copy wait on the host while the modes run: each mode's device
memory is its own model copy, the inputs and its work. `run_model_in_process` runs one case in a
process of its own (`python -m coil.bench.model_runs --case ...`).
"""

from __future__ import annotations

import copy
import functools
import gc
import importlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from coil.bench import measure
from coil.bench.models import (
    ACCURACY_CALL,
    IMPORTED_BEFORE_THE_CLOCK,
    MULTIPLIER,
    TOL,
    _compile_and_step,
    _grads,
    _infer_step,
    _model,
    _rmse,
    _split,
    _train_step,
    first_call,
)
from coil.knobs import KNOBS, Knobs, knobs

# set by `coil bench --precompile` (knob bench_precompile): the first-call processes run under
# torch's caching precompile (`new_process_first_call`)
PRECOMPILE_ENV = KNOBS["bench_precompile"].env
# how many warm-start processes each compiled mode of a model case runs (`coil bench
# --warm-runs`, knob bench_warm_runs, default WARM_RUNS); the case reports their median (`warm_median`)
WARM_RUNS_ENV = KNOBS["bench_warm_runs"].env
WARM_RUNS = Knobs.bench_warm_runs.default_value(knobs)


def precompile_requested() -> bool:
    """Whether this bench run measures first calls under torch's caching precompile."""
    return bool(knobs.bench_precompile)


def warm_runs() -> int:
    """The number of warm-start processes per compiled mode: WARM_RUNS_ENV, else WARM_RUNS.
    Raises ValueError, naming the variable, when it is set to anything but a positive integer."""
    return int(knobs.bench_warm_runs)


def warm_median(runs: list[float | str]) -> float | str:
    """One figure for a mode's warm start from its processes' first calls: the median of the
    seconds when every process gave them; otherwise the first failure's message (a failed warm
    start is reported, never averaged away). One process's figure is one sample of a noisy
    quantity (an outlier process can take half again as long as its peers), hence the median."""
    if not runs:
        raise ValueError("no warm-start process ran")
    failed = [r for r in runs if not isinstance(r, float)]
    return failed[0] if failed else statistics.median(r for r in runs if isinstance(r, float))


def own_process_peak(step: Callable[[], Any]) -> dict[str, Any]:
    """The warm peak (`measure.warm_peak`) of `step` in a process that ran nothing else: the call
    that `coil bench` reports as a mode's peak memory. Measured in the shared process instead, a
    mode would inherit the allocator state the modes before it left (free blocks an earlier mode
    pinned in the ordinary pool count as reserved memory)."""
    for _ in range(ACCURACY_CALL - 1):  # to the replayed call
        step()
    return measure.warm_peak(step)


def new_process_first_call(case: str, mode: str, env: dict[str, str]
                           ) -> tuple[float | str, list[dict[str, Any]], dict[str, Any] | None, dict[str, Any]]:
    """`first_call` in a new process whose cache folders are `env`'s (empty: a cold compile;
    filled by an earlier call: a warm one): its seconds, for coil where each graph came from
    (`graph_caches`: name, graph cache, AOT cache, stage seconds), the warm peak of that
    process's own step (`own_process_peak`; None if it printed none), and what Dynamo did
    there (`dynamo_report`: graphs traced, Dynamo-cache counters). The process of a mode other
    than coil runs with COIL_PREHASH=0: it imports coil.backend too, whose hashing thread would
    otherwise give that mode's first call coil's head start."""
    cmd = [sys.executable, "-m", "coil.bench.model_runs", case, mode]
    extra = {"TORCH_CACHING_PRECOMPILE": "1"} if precompile_requested() else {}
    base = knobs.environ() if mode == "coil" else knobs.environ(prehash=False)
    try:
        p = subprocess.run(cmd, env={**base, **env, **extra}, capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        return "timeout", [], None, {}
    seconds: float | str = f"failed (exit {p.returncode}): {p.stderr.strip()[-300:]}"
    caches: list[dict[str, Any]] = []
    peak: dict[str, Any] | None = None
    dynamo: dict[str, Any] = {}
    for line in p.stdout.splitlines():
        if line.startswith("first_call_s="):
            seconds = float(line.split("=", 1)[1])
        elif line.startswith("graph_caches="):
            caches = json.loads(line.split("=", 1)[1])
        elif line.startswith("warm_peak="):
            peak = json.loads(line.split("=", 1)[1])
        elif line.startswith("dynamo="):
            dynamo.update(json.loads(line.split("=", 1)[1]))
    return seconds, caches, peak, dynamo


def warm_starts(case: str, mode: str, env: dict[str, str]
                ) -> tuple[list[float | str], list[dict[str, Any]], dict[str, Any] | None, dict[str, Any]]:
    """`mode`'s warm first calls: `new_process_first_call` in `warm_runs()` new processes one
    after the other (one for eager, which compiles nothing), all on the cache folders `env`. The
    seconds (or failure) of each process, and the cache verdicts, own-process peak and Dynamo
    report of the first."""
    warm = [new_process_first_call(case, mode, env) for _ in range(1 if mode == "eager" else warm_runs())]
    _, caches, peak, dynamo = warm[0]
    return [w[0] for w in warm], caches, peak, dynamo


def dynamo_report() -> dict[str, Any]:
    """What Dynamo did in this process: how many graphs it traced, its Dynamo-cache counters
    (torch's caching precompile: hit, miss, error), and the seconds of its frame compiles split
    into `trace_s` (Dynamo's own work: tracing, guards, bytecode) and `backend_s` (the backend
    calls inside them: coil's or Inductor's compile, AOTAutograd and its cache included), from
    torch's `compilation_time_metrics` (absent from a torch that does not keep them); where it
    compiled under caching precompile without a package to load, `precompile_saved` from
    `save_package`."""
    from torch._dynamo.utils import compilation_time_metrics, counters

    out: dict[str, Any] = {"traced": counters["stats"]["unique_graphs"], "cache": dict(counters["dynamo_cache"])}
    frames = compilation_time_metrics.get("_compile.compile_inner")
    if frames:
        backend = sum(compilation_time_metrics.get("OutputGraph.call_user_compiler", []))
        out["trace_s"] = round(sum(frames) - backend, 3)
        out["backend_s"] = round(backend, 3)
    if "dynamo_cache_miss" in out["cache"]:
        out["precompile_saved"] = save_package()
    return out


def save_package() -> bool | str:
    """Save Dynamo's package (`torch.compiler.save_cache_artifacts`; called after the first call
    was timed): True, or what saving raised (torch cannot package every model)."""
    import torch

    try:
        torch.compiler.save_cache_artifacts()
        return True
    except Exception as e:
        return f"{type(e).__name__}: {e}"[:300]


def graph_caches() -> list[dict[str, Any]]:
    """Each graph coil compiled in this process: its name, its graph-, AOT- and frontend-cache
    verdicts and the seconds of each coil stage it went through (a warm start: runtime compile,
    load)."""
    from coil.backend.stats import COMPILED

    return [{"name": g.name, "graph_cache": str(g.graph_cache), "aot_cache": str(g.aot_cache),
             "frontend_cache": str(g.frontend_cache),
             "stage_s": {k: round(v, 3) for k, v in g.stage_times.items()}} for g in COMPILED]


def run_model(case: str, cold: Callable[[str], Any], modes: tuple[str, ...]) -> dict[str, Any]:
    """Measure one model case in every mode. `cold(tag)` is a context manager with empty caches
    that yields the cache environment (for the warm-compile process)."""
    import torch

    spec, kind = _split(case)
    base = _model(spec)
    inputs = spec.inputs(base)
    res: dict[str, Any] = {"kind": "model", "model": spec.describe, "tol": TOL}
    if kind == "infer_bf16":
        m16 = copy.deepcopy(base).to(torch.bfloat16).eval()
        ref = _infer_step(spec, copy.deepcopy(base).to(torch.float64), inputs)
        e_rmse = [_rmse(_infer_step(spec, m16, inputs), ref)]
        refs = [ref]
        res["dtype"] = "bf16"
    else:
        m64 = copy.deepcopy(base).to(torch.float64)
        refs = [_train_step(spec, m64, inputs, amp=False), *_grads(m64)]
        del m64
        e = copy.deepcopy(base)
        e_rmse = [_rmse(a, r) for a, r in zip([_train_step(spec, e, inputs), *_grads(e)], refs, strict=True)]
        del e
        res["dtype"] = "fp32 weights, autocast bf16"
        res["step"] = "zero_grad + forward + loss + backward (no optimizer)"
    res["tensors_checked"] = len(refs)
    # the references and the master copy of the model wait on the host, so that a mode's warm
    # peak counts its own model, its inputs and its work only: references kept on the device
    # (fp64: large) would also pin free blocks of the ordinary pool that eager or Inductor
    # allocations reuse but a CUDA-graph pool cannot
    refs = [r.cpu() for r in refs]
    base.to("cpu")
    gc.collect()
    torch.cuda.empty_cache()
    m: Any = None
    for mode in modes:
        r: dict[str, Any] = {}
        try:
            if mode == "coil":
                import coil.backend as cb

                cb.reset()
            m = m16 if kind == "infer_bf16" else copy.deepcopy(base).to("cuda")
            with cold(f"{case}-{mode}") as env:
                # the cold and the warm first call in a new process each, timed alike (imports
                # included, `first_call`); eager's one process gives its own-process peak
                if mode != "eager":
                    cold_s, _, _, cold_dynamo = new_process_first_call(case, mode, env)
                    r["first_call_s"] = cold_s
                runs, caches, own_peak, warm_dynamo = warm_starts(case, mode, env)
                if mode == "eager":
                    r["first_call_s"] = runs[0]
                else:
                    r["warm_first_call_runs_s"] = runs
                    r["warm_first_call_s"] = warm_median(runs)
                    r["warm_cache_env"] = env  # to repeat the warm start by hand
                    r["dynamo_cold"], r["dynamo_warm"] = cold_dynamo, warm_dynamo
                if mode == "coil":
                    r["warm_graph_caches"] = caches
                # this process compiles from the caches the cold process filled
                r["in_process_first_call_s"], step, out = _compile_and_step(spec, kind, m, inputs, mode)
            for _ in range(ACCURACY_CALL - 1):  # check a replayed call, not the (eager) warm-up
                del out
                out = step()
            got = [out] if kind == "infer_bf16" else [out, *_grads(m)]
            ratios = [_rmse(a, b) / (MULTIPLIER * e + TOL / 10) for a, b, e in zip(got, refs, e_rmse, strict=True)]
            del got, out
            r["worst_ratio"] = max(ratios)
            r["failed_checks"] = [i for i, x in enumerate(ratios) if x > 1]
            r["accuracy_ok"] = not r["failed_checks"]
            r["ms"] = measure.do_bench(step, 20, 200)
            shared = measure.warm_peak(step)
            r["shared_process"] = shared
            if own_peak is None:
                r["peak_error"] = "the mode's own process printed no warm peak"
            else:
                r.update(own_peak)
            if mode == "coil":
                r["graphs"] = measure.coil_graphs()
            del step
        except Exception as exc:
            r["error"] = f"{type(exc).__name__}: {exc}"[:800]
            traceback.print_exc()
        _release(m)
        res[mode] = r
    return res


def _release(model: Any) -> None:
    """Free what one mode leaves behind before the next is measured: its gradients, and Dynamo's
    compiled code, whose AOTAutograd wrappers keep the compiled module's parameters (and with
    them their `.grad`) alive; without this a later mode's warm peak would count the earlier
    mode's model."""
    import gc

    import torch

    if isinstance(model, torch.nn.Module):
        model.zero_grad(set_to_none=True)
    torch._dynamo.reset()
    gc.collect()
    torch.cuda.empty_cache()


def run_model_in_process(case: str, root: Path, modes: tuple[str, ...]) -> dict[str, Any]:
    """`run_model` in a new process, one per case: eager, Inductor and coil still run side by side
    on the same inputs, but nothing an earlier case left behind (cached blocks, Dynamo code,
    CUDA-graph pools) is counted in this case's memory or time."""
    fd, name = tempfile.mkstemp(suffix=".json", dir=root)
    os.close(fd)
    cmd = [sys.executable, "-m", "coil.bench.model_runs", "--case", case, str(root), ",".join(modes), name]
    try:
        p = subprocess.run(cmd, timeout=3600)
        code: object = p.returncode
    except subprocess.TimeoutExpired:
        code = "timeout"
    try:
        res: dict[str, Any] = json.loads(Path(name).read_text())
        return res
    except (OSError, ValueError):
        return {"kind": "model", "error": f"the case's process wrote no result (exit {code})"}


def main(argv: list[str]) -> int:
    """`python -m coil.bench.model_runs CASE MODE`: print the first call's seconds, each coil
    graph's cache verdicts, what Dynamo did (`dynamo_report`) and the step's own-process warm
    peak (`own_process_peak`);
    `... --case CASE ROOT MODES OUT.json`: `run_model` for one case (modes comma-separated, cold
    caches under ROOT), its result written to OUT.json."""
    importlib.import_module(IMPORTED_BEFORE_THE_CLOCK)

    if argv[:1] == ["--case"]:
        case, root, modes, out = argv[1:]
        res = run_model(case, functools.partial(measure.cold_caches, Path(root)), tuple(modes.split(",")))
        Path(out).write_text(json.dumps(res, indent=2, default=str))
        return 0
    case, mode = argv

    seconds, step = first_call(case, mode)
    print(f"first_call_s={seconds}")
    print(f"graph_caches={json.dumps(graph_caches())}", flush=True)
    print(f"dynamo={json.dumps(dynamo_report())}", flush=True)
    print(f"warm_peak={json.dumps(own_process_peak(step))}")
    print(json.dumps({"case": case, "mode": mode}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
