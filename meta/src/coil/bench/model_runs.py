"""One model case of `coil bench` in every mode, and the new processes its first calls run in.

`run_model(case, cold, modes, settings)` measures a case (coil.bench.models) in each mode in
turn, each mode first freeing what the one before left (its model, gradients and Dynamo code).
By default the cold and the warm first call are each measured in a new process
(`new_process_first_call`): empty cache folders, then the folders the cold one filled, the warm
one in `settings.warm_runs` processes (default: the knob, 3; `coil bench --warm-runs`, 0 for
none) whose median is reported (`warm_median`); the bench's own process then compiles from
those caches for the timings, memory, accuracy and counts. With `settings.quick` (`coil bench
--quick`) no process is started: the bench's process compiles on the empty caches and times
that first call itself (after the modes before it, so with their imports done and whatever they
left: coil's cold call of BART's training step took 33-40 s there after `inductor_ro`, 20-25 s
alone), and its peak memory is the shared process's; such first calls are not compared.
`run_modes_apart` (`coil bench --mode-processes`) gives each mode a case process of its own
instead, so that no mode's compile or timing follows another's in one process.

With `coil bench --precompile` both processes of every mode (Inductor's too) run under torch's
caching precompile (TORCH_CACHING_PRECOMPILE=1): the cold one saves Dynamo's package after its
step (`torch.compiler.save_cache_artifacts`, not timed), and the warm one loads it, skipping
Dynamo's tracing where torch can package the model. The bench's own process does not use it.

The references and the model's master copy wait on the host while the modes run: each mode's
device memory is its own model copy, the inputs and its work. A model that fails to build is a
result with its `error`; one whose fp64 reference fails is measured without accuracy
(`reference_error`); a mode that fails (compile, run, out of memory) has its `error` and the
next mode runs. `run_model_in_process` runs one case in a process of its own (`python -m
coil.bench.model_runs --case ...`), which writes its result after every mode, so that a case
that runs out of its time budget or dies keeps the modes it finished.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import gc
import importlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from coil.bench import lanes, measure, planned_peaks
from coil.bench import spec as _spec
from coil.bench.measure import is_coil
from coil.bench.models import IMPORTED_BEFORE_THE_CLOCK, compile_and_step, first_call, split
from coil.bench.spec import ModelSpec
from coil.bench.steps import (
    ACCURACY_CALL,
    OPT_LR,
    TOL,
    checked,
    make_step,
    prepare,
    ratios,
    reference,
    rmse,
)
from coil.knobs import KNOBS, Knobs, knobs

# set by `coil bench --precompile` (knob bench_precompile): the first-call processes run under
# torch's caching precompile (`new_process_first_call`)
PRECOMPILE_ENV = KNOBS["bench_precompile"].env
# how many warm-start processes each compiled mode of a model case runs (`coil bench
# --warm-runs`, knob bench_warm_runs, default WARM_RUNS); the case reports their median (`warm_median`)
WARM_RUNS_ENV = KNOBS["bench_warm_runs"].env
WARM_RUNS = Knobs.bench_warm_runs.default_value(knobs)
# the longest a first-call process may take
FIRST_CALL_TIMEOUT_S = 600.0
# the longest a mode waits for the other lanes' work to end before it times anyway, beside it
# (coil.bench.lanes): a quick mode's compile takes a minute or two at the zoo's sizes
LANE_WAIT_S = 180.0


@dataclasses.dataclass(frozen=True)
class CaseSettings:
    """How `run_model` measures a case. `warm_runs`: warm-start processes per compiled mode
    (None: the bench_warm_runs knob; 0: none, the cold process gives the own-process peak);
    `quick`: no first-call processes (module docstring); `loop_steps`: steps of the timed loop
    (`measure.loop_ms`); `deadline`: the `time.time()` by which the case must end (first-call
    processes get at most what is left), None for no limit; `lane_lock`: the lock file the lanes
    of one machine share (`coil.bench.lanes`: timing never overlaps another lane's work), None
    for a lane alone; `mode_processes`: each mode in a case process of its own
    (`run_modes_apart`)."""

    warm_runs: int | None = None
    quick: bool = False
    loop_steps: int = 20
    deadline: float | None = None
    lane_lock: str | None = None
    mode_processes: bool = False

    def __post_init__(self) -> None:
        if self.warm_runs is not None and self.warm_runs < 0:
            raise ValueError(f"warm_runs must be 0 or more, got {self.warm_runs}")
        if self.loop_steps < 1:
            raise ValueError(f"loop_steps must be at least 1, got {self.loop_steps}")

    def runs(self) -> int:
        """Warm-start processes per compiled mode."""
        return warm_runs() if self.warm_runs is None else self.warm_runs

    def timeout_s(self) -> float:
        """Seconds a first-call process may take now."""
        if self.deadline is None:
            return FIRST_CALL_TIMEOUT_S
        return max(1.0, min(FIRST_CALL_TIMEOUT_S, self.deadline - time.time()))

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> CaseSettings:
        return cls(**json.loads(text))


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


def own_process_peak(step: Callable[[], Any], base: dict[str, float] | None = None) -> dict[str, Any]:
    """The warm peak (`measure.warm_peak`, its growth over `base`) of `step` in a process that
    ran nothing else: the call that `coil bench` reports as a mode's peak memory. Measured in
    the shared process instead, a mode would inherit the allocator state the modes before it
    left (free blocks an earlier mode pinned in the ordinary pool count as reserved memory)."""
    for _ in range(ACCURACY_CALL - 1):  # to the replayed call
        step()
    return measure.warm_peak(step, base)


def new_process_first_call(case: str, mode: str, env: dict[str, str], timeout_s: float = FIRST_CALL_TIMEOUT_S
                           ) -> tuple[float | str, list[dict[str, Any]], dict[str, Any] | None, dict[str, Any]]:
    """`first_call` in a new process whose cache folders are `env`'s (empty: a cold compile;
    filled by an earlier call: a warm one): its seconds, for coil where each graph came from
    (`graph_caches`: name, graph cache, AOT cache, stage seconds), the warm peak of that
    process's own step (`own_process_peak`; None if it printed none), and what Dynamo did
    there (`dynamo_report`: graphs traced, Dynamo-cache counters). The process of a mode other
    than coil's runs with COIL_PREHASH=0: it imports coil.backend too, whose hashing thread would
    otherwise give that mode's first call coil's head start."""
    cmd = [sys.executable, "-m", "coil.bench.model_runs", case, mode]
    extra = {"TORCH_CACHING_PRECOMPILE": "1"} if precompile_requested() else {}
    base = knobs.environ() if is_coil(mode) else knobs.environ(prehash=False)
    try:
        p = subprocess.run(cmd, env={**base, **env, **extra}, capture_output=True, text=True, timeout=timeout_s)
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


def warm_starts(case: str, mode: str, env: dict[str, str], runs: int | None = None,
                timeout_s: float = FIRST_CALL_TIMEOUT_S
                ) -> tuple[list[float | str], list[dict[str, Any]], dict[str, Any] | None, dict[str, Any]]:
    """`mode`'s warm first calls: `new_process_first_call` in `runs` (default `warm_runs()`) new
    processes one after the other (one for eager, which compiles nothing), all on the cache
    folders `env`. The seconds (or failure) of each process, and the cache verdicts, own-process
    peak and Dynamo report of the first (empty and None when no process ran)."""
    count = 1 if mode == "eager" else (warm_runs() if runs is None else runs)
    warm = [new_process_first_call(case, mode, env, timeout_s=timeout_s) for _ in range(count)]
    if not warm:
        return [], [], None, {}
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


def first_call_processes(case: str, mode: str, env: dict[str, str], settings: CaseSettings
                         ) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """A mode's first calls in new processes: the cold one on the empty caches `env` (not for
    eager, which compiles nothing), then `settings.runs()` warm ones on what it filled (one
    for eager). Their figures for the mode's result, and the own-process peak: the first warm
    process's, else the cold one's."""
    r: dict[str, Any] = {}
    cold_peak: dict[str, Any] | None = None
    if mode != "eager":
        cold_s, _, cold_peak, r["dynamo_cold"] = new_process_first_call(case, mode, env, settings.timeout_s())
        r["first_call_s"] = cold_s
    runs, caches, own_peak, warm_dynamo = warm_starts(case, mode, env, settings.runs(), settings.timeout_s())
    if mode == "eager":
        r["first_call_s"] = runs[0]
    elif runs:
        r["warm_first_call_runs_s"] = runs
        r["warm_first_call_s"] = warm_median(runs)
        r["warm_cache_env"] = env  # to repeat the warm start by hand
        r["dynamo_warm"] = warm_dynamo
    if is_coil(mode) and caches:
        r["warm_graph_caches"] = caches
    return r, own_peak if own_peak is not None else cold_peak


@dataclasses.dataclass
class _Case:
    """What every mode of one case shares: its spec and step kind, the master model (fp32, on the
    host between modes), the inference model and inputs, the references and eager's errors."""

    name: str
    spec: ModelSpec
    step: str
    base: Any
    infer_model: Any
    inputs: Any
    refs: list[Any] | None
    eager_rmse: list[float]


def run_model(case: str, cold: Callable[[str], Any], modes: tuple[str, ...],
              settings: CaseSettings | None = None,
              write: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Measure one model case in every mode (module docstring). `cold(tag)` is a context manager
    with empty caches that yields the cache environment (for the warm-compile process);
    `write(result)`, when given, is called with the result so far before and after each mode
    (`running` names the mode under way). ValueError for a name that is no model case."""
    settings = settings or CaseSettings()
    spec, step = split(case)
    res: dict[str, Any] = {"kind": "model", "group": spec.group, "family": spec.family, "model_kind": spec.kind,
                           "model": spec.describe, "step": step, "tol": TOL}
    save = write or (lambda _r: None)
    res["running"] = "build"
    save(res)
    try:
        c = _prepare_case(case, spec, step, res)
    except Exception as exc:
        res.pop("running", None)
        res["error"] = f"build: {type(exc).__name__}: {exc}"[:800]
        traceback.print_exc()
        save(res)
        return res
    for mode in modes:
        res["running"] = mode
        save(res)
        res[mode] = _run_mode(c, mode, cold, settings)
    res.pop("running", None)
    save(res)
    return res


def _prepare_case(case: str, spec: ModelSpec, step: str, res: dict[str, Any]) -> _Case:
    """Build the model, its references and eager's errors against them; leave the master copy
    and the references on the host. A failed reference leaves `refs` None (`reference_error`)."""
    import torch

    base, inputs = spec.make()
    infer_model, infer_inputs = prepare(copy.deepcopy(base), inputs, step) if step == "infer_bf16" else (None, inputs)
    refs: list[Any] | None = None
    e_rmse: list[float] = []
    try:
        refs = [r.cpu() for r in reference(spec, step, base, inputs)]
        if step == "infer_bf16":
            got = checked(step, make_step(spec, step, infer_model, infer_inputs)(), infer_model)
        else:
            e = copy.deepcopy(base)
            got = checked(step, make_step(spec, step, e, inputs)(), e)
            del e
        e_rmse = [rmse(a, r) for a, r in zip(got, refs, strict=True)]
        del got
        res["tensors_checked"] = len(refs)
    except Exception as exc:
        refs = None
        res["reference_error"] = f"{type(exc).__name__}: {exc}"[:800]
        traceback.print_exc()
    if step != "infer_bf16":
        res["dtype"] = "fp32 weights, autocast bf16"
        res["step_does"] = {"train_amp": "zero_grad + forward + loss + backward (no optimizer)",
                            "train_accum": "zero_grad + forward + loss + backward (no optimizer), micro-steps "
                                           "accumulated",
                            "train_opt": f"zero_grad + forward + loss + backward + AdamW step (lr {OPT_LR})"}[step]
    else:
        res["dtype"] = "bf16"
    # the references and the master copy of the model wait on the host, so that a mode's warm
    # peak counts its own model, its inputs and its work only: references kept on the device
    # (fp64: large) would also pin free blocks of the ordinary pool that eager or Inductor
    # allocations reuse but a CUDA-graph pool cannot
    base.to("cpu")
    gc.collect()
    torch.cuda.empty_cache()
    return _Case(case, spec, step, base, infer_model, infer_inputs, refs, e_rmse)


def _run_mode(c: _Case, mode: str, cold: Callable[[str], Any], settings: CaseSettings) -> dict[str, Any]:
    """One mode of one case: its first calls, accuracy on call ACCURACY_CALL, `ms` (do_bench),
    `loop_ms`, for coil_nocg each graph's planned against measured peak (`peak_check`,
    coil.bench.planned_peaks), peak memory and its growth, and for coil its graphs and counts,
    its CUDA graphs (`measure.cuda_graph_counts`; `cuda_graph_stops`, why any stopped) and
    `uncaptured_calls_timed` and `outputs_copied_away_timed` (the graph calls run without their
    CUDA graph, the outputs copied away before a replay, during do_bench and the loop); `error`
    when any of it raised.
    Frees what the mode left before returning."""
    from torch._dynamo.utils import counters

    r: dict[str, Any] = {}
    m: Any = None
    held = contextlib.ExitStack()
    try:
        if is_coil(mode):
            import coil.backend as cb

            cb.reset()
        counters.clear()
        m = c.infer_model if c.step == "infer_bf16" else prepare(copy.deepcopy(c.base).to(_spec.DEVICE), c.inputs,
                                                                 c.step)[0]
        own_peak: dict[str, Any] | None = None
        held.enter_context(lanes.working(settings.lane_lock))  # side by side with other lanes (coil.bench.lanes)
        with cold(f"{c.name}-{mode}") as env:
            if not settings.quick:
                # the cold and the warm first call in a new process each, timed alike (imports
                # included, `first_call`); eager's one process gives its own-process peak
                found, own_peak = first_call_processes(c.name, mode, env, settings)
                r.update(found)
            base = measure.baseline()
            # quick: this process compiles on the empty caches; else from those the cold process filled
            seconds, step, out = compile_and_step(c.spec, c.step, m, c.inputs, mode)
            r["first_call_s" if settings.quick else "in_process_first_call_s"] = seconds
        if mode != "eager":
            r["dynamo_graphs"] = measure.dynamo_graphs()
        for _ in range(ACCURACY_CALL - 1):  # check a replayed call, not the (eager) warm-up
            del out
            out = step()
        if c.refs is not None:
            worst = ratios(checked(c.step, out, m), c.refs, c.eager_rmse)
            r["worst_ratio"] = max(worst)
            r["failed_checks"] = [i for i, x in enumerate(worst) if x > 1]
            r["accuracy_ok"] = not r["failed_checks"]
        del out
        held.close()
        before = measure.cuda_graph_counts() if is_coil(mode) else None
        with lanes.timing_alone(settings.lane_lock, _lane_wait_s(settings)) as alone:
            r["ms"] = measure.do_bench(step, 20, 200)
            r["loop_ms"] = measure.loop_ms(step, settings.loop_steps)
        if not alone:
            r["timed_beside_lanes"] = True
        if before is not None:  # the CUDA graphs, and the timed calls they ran without their graph
            after = measure.cuda_graph_counts()
            r.update(after, uncaptured_calls_timed=after["uncaptured_calls"] - before["uncaptured_calls"],
                     outputs_copied_away_timed=after["outputs_copied_away"] - before["outputs_copied_away"])
            if stops := measure.cuda_graph_stops():
                r["cuda_graph_stops"] = stops
        if mode == planned_peaks.MODE:  # warm calls measured apart from the timed loop
            r["peak_check"] = planned_peaks.check(step)
        r["shared_process"] = measure.warm_peak(step, base)
        if before is not None:  # the peak's call paid for a copy of outputs a caller held
            r["shared_process"]["peak_outputs_copied_away"] = (measure.cuda_graph_counts()["outputs_copied_away"]
                                                               - r["outputs_copied_away"])
        _peak(r, own_peak, settings)
        if is_coil(mode):
            r["graphs"] = measure.coil_graphs()
            r.update(measure.coil_counts(r["graphs"]))
        del step
    except Exception as exc:
        r["error"] = f"{type(exc).__name__}: {exc}"[:800]
        traceback.print_exc()
    finally:
        held.close()
    _release(m)
    return r


def _lane_wait_s(settings: CaseSettings) -> float:
    """How long a mode waits to time alone (coil.bench.lanes): LANE_WAIT_S, and at most half of
    what is left of the case's time."""
    if settings.deadline is None:
        return LANE_WAIT_S
    return max(0.0, min(LANE_WAIT_S, (settings.deadline - time.time()) / 2))


def _peak(r: dict[str, Any], own: dict[str, Any] | None, settings: CaseSettings) -> None:
    """The mode's reported peak: its own process's (`own_process_peak`), or in quick mode the
    shared process's (`peak_where` says which)."""
    if settings.quick:
        r.update({k: v for k, v in r["shared_process"].items() if k != "after_call_by_pool"})
        r["peak_where"] = "bench process"
    elif own is None:
        r["peak_error"] = "the mode's own process printed no warm peak"
    else:
        r.update(own)
        r["peak_where"] = "own process"


def _release(model: Any) -> None:
    """Free what one mode leaves behind before the next is measured: its gradients, and Dynamo's
    compiled code, whose AOTAutograd wrappers keep the compiled module's parameters (and with
    them their `.grad`) alive; without this a later mode's warm peak would count the earlier
    mode's model."""
    import torch

    if isinstance(model, torch.nn.Module):
        model.zero_grad(set_to_none=True)
    torch._dynamo.reset()
    gc.collect()
    with contextlib.suppress(Exception):  # no device, or one left broken by the mode
        torch.cuda.empty_cache()


def run_model_in_process(case: str, root: Path, modes: tuple[str, ...], settings: CaseSettings | None = None,
                         limit_s: float | None = None) -> dict[str, Any]:
    """`run_model` in a new process, one per case: the modes still run side by side on the same
    inputs, but nothing an earlier case left behind (cached blocks, Dynamo code, CUDA-graph
    pools) is counted in this case's memory or time. The process (and every process it started)
    is killed after `limit_s` seconds; the result then keeps the modes that finished, and each
    other mode has an error saying why it has no figures (`unfinished`)."""
    settings = settings or CaseSettings()
    if limit_s is not None:
        settings = dataclasses.replace(settings, deadline=time.time() + limit_s)
    fd, name = tempfile.mkstemp(suffix=".json", dir=root)
    os.close(fd)
    cmd = [sys.executable, "-m", "coil.bench.model_runs", "--case", case, str(root), ",".join(modes), name,
           settings.to_json()]
    code: int | str = run_killing_group(cmd, limit_s)
    try:
        res: dict[str, Any] = json.loads(Path(name).read_text())
    except (OSError, ValueError):
        return {"kind": "model", "error": f"the case's process wrote no result (exit {code})"}
    return unfinished(res, modes, code, limit_s)


def run_modes_apart(case: str, root: Path, modes: tuple[str, ...], settings: CaseSettings | None = None,
                    limit_s: float | None = None) -> dict[str, Any]:
    """`run_model_in_process` once per mode, each mode alone in a case process of its own (its
    build, fp64 reference, compile, timing and memory), within `limit_s` seconds for them all;
    one result, as one process gives. In one process a mode is compiled and timed after the
    modes before it, and coil's first calls and host-bound steps measured slower there than
    alone (docs/perf.md, "How we measure"); apart, no mode follows another. A model that fails
    to build is the case's `error` (the modes after it are not tried)."""
    deadline = None if limit_s is None else time.time() + limit_s
    res: dict[str, Any] = {}
    for mode in modes:
        left = None if deadline is None else deadline - time.time()
        if left is not None and left < 1.0:
            res[mode] = {"error": f"the case's time budget of {limit_s:.0f} s ran out before this mode"}
            continue
        one = run_model_in_process(case, root, (mode,), settings, left)
        if mode not in one:  # it did not get as far as the mode: the build, or a process that wrote nothing
            if not res:
                return one
            res[mode] = {"error": one.get("error", "the mode's process gave no result")}
            continue
        res[mode] = one.pop(mode)
        for key, value in one.items():  # the case's own facts: the same in every mode's process
            res.setdefault(key, value)
    return res


def run_killing_group(cmd: list[str], limit_s: float | None) -> int | str:
    """Run `cmd` in a new process group; after `limit_s` seconds (or on an interrupt) kill the
    group. The group is killed when `cmd` ends too: processes it started and left behind
    (compile workers, a first-call process) would hold memory and CPUs the next case measures.
    Its exit status, or "timeout"."""
    p = subprocess.Popen(cmd, start_new_session=True)
    try:
        return p.wait(timeout=limit_s)
    except subprocess.TimeoutExpired:
        return "timeout"
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def unfinished(res: dict[str, Any], modes: tuple[str, ...], code: int | str, limit_s: float | None) -> dict[str, Any]:
    """A case process's result completed: where the process ran out of time or died, the mode it
    was running and those it never reached get an `error` saying so (a build it did not finish
    is the case's `error`)."""
    running = res.pop("running", None)
    if code == 0 and running is None:
        return res
    why = (f"the case's time budget of {limit_s:.0f} s ran out" if code == "timeout" and limit_s is not None
           else f"the case's process ended (exit {code})")
    if running == "build":
        res["error"] = f"{why} while building the model and its reference"
        return res
    if "error" not in res:
        for m in modes:
            if m not in res:
                res[m] = {"error": f"{why} during this mode" if m == running else f"{why} before this mode"}
    return res


def main(argv: list[str]) -> int:
    """`python -m coil.bench.model_runs CASE MODE`: print the first call's seconds, each coil
    graph's cache verdicts, what Dynamo did (`dynamo_report`) and the step's own-process warm
    peak and its growth over the model's own memory (`own_process_peak`);
    `... --case CASE ROOT MODES OUT.json [SETTINGS]`: `run_model` for one case (modes
    comma-separated, cold caches under ROOT, `CaseSettings` as JSON), its result written to
    OUT.json before and after every mode."""
    importlib.import_module(IMPORTED_BEFORE_THE_CLOCK)

    if argv[:1] == ["--case"]:
        case, root, modes, out = argv[1:5]
        settings = CaseSettings.from_json(argv[5]) if len(argv) > 5 else CaseSettings()

        def write(res: dict[str, Any]) -> None:
            Path(out).write_text(json.dumps(res, indent=2, default=str))

        run_model(case, functools.partial(measure.cold_caches, Path(root)), tuple(modes.split(",")), settings, write)
        return 0
    case, mode = argv

    seconds, step, base = first_call(case, mode)
    print(f"first_call_s={seconds}")
    print(f"graph_caches={json.dumps(graph_caches())}", flush=True)
    print(f"dynamo={json.dumps(dynamo_report())}", flush=True)
    print(f"warm_peak={json.dumps(own_process_peak(step, base))}")
    print(json.dumps({"case": case, "mode": mode}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
