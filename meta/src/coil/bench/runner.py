"""`coil bench`: eager, TorchInductor (default and reduce-overhead) and coil (with and without
CUDA graphs) side by side.

The suite (coil.bench.suite) is the micro cases (coil.bench.micro: fused operations, run in this
process), the gemm and attention cases (coil.bench.gemm, coil.bench.attention: matmuls with
their epilogues and attention as models write it, run in this process by
coil.bench.kernel_runs) and the model cases (coil.bench.models: the five hand-picked models and
the zoo's, each measured in a process of its own by coil.bench.model_runs). The modes
(`measure.MODES`): eager, `inductor` (torch.compile default, no CUDA graphs), `inductor_ro`
(mode="reduce-overhead": CUDA graphs), `coil` (its defaults: CUDA graphs) and `coil_nocg`
(CUDA graphs off); each coil mode's fair peer is the Inductor mode with the same CUDA-graph
choice (coil.bench.pairs). `inductor_max` (max-autotune without CUDA graphs) runs where asked
for and on the gemm cases, `flex` (the FlexAttention form, compiled by Inductor) on the
attention cases (`suite.case_modes`).

For each case, on the same inputs, each mode in turn (with `--mode-processes`, each mode in a case
process of its own: `model_runs.run_modes_apart`): `torch._dynamo.reset()`, fresh cache folders
(TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR, COIL_CACHE_DIR set to new temp folders before the
compile, in-memory kernel memos cleared: `measure.cold_caches`), the first call timed from
`torch.compile` on (for a model case cold and warm, each in new processes, unless the run is
quick), then the median of `triton.testing.do_bench` (CUDA events), the wall-clock time of a
loop of steps, the peak memory of one warm iteration and its growth over the model's own
(`measure.warm_peak`), accuracy with the PyTorch benchmark harness's rule against an fp64
reference: RMSE(mode) <= 3 * RMSE(eager) + tol / 10, and for coil the graphs it compiled, ran
eagerly after a compile error, and the ATen fallbacks inside them.

`run` writes bench.json and bench.md (coil.bench.report) to --out after every case (a run cut
short keeps what it measured); a model case that fails (build, compile, run, out of memory, its
time budget) is a row with its error and the run goes on.
"""

from __future__ import annotations

import contextlib
import datetime
import importlib
import json
import math
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from coil.bench.kernel_runs import estimate_s as kernel_estimate_s
from coil.bench.kernel_runs import run_kernel
from coil.bench.measure import ALL_MODES
from coil.bench.micro import ROUNDS, Ctx, run_micro
from coil.bench.model_runs import (
    CaseSettings,
    precompile_requested,
    run_model_in_process,
    run_modes_apart,
)
from coil.bench.models import IMPORTED_BEFORE_THE_CLOCK, estimate_s, model_cases
from coil.bench.report import render
from coil.bench.suite import case_modes, kernel_cases, select, suite_names

__all__ = ["parse_modes", "run", "select", "suite_names"]

# rough seconds a micro case takes (every mode, cold compiles): what --budget-s counts on
_EST_MICRO = 15.0


def parse_modes(modes: Sequence[str]) -> tuple[str, ...]:
    """The modes asked for, in ALL_MODES's order; ValueError for an unknown one or none."""
    bad = [m for m in modes if m not in ALL_MODES]
    if bad or not modes:
        raise ValueError(f"unknown modes {bad} (known: {', '.join(ALL_MODES)})" if bad else "no modes")
    return tuple(m for m in ALL_MODES if m in modes)


def run(names: Sequence[str], out_dir: str, budget_s: float = 480.0, modes: Sequence[str] | None = None,
        rounds: int = ROUNDS, settings: CaseSettings | None = None, case_budget_s: float | None = None) -> int:
    """Run the selected cases, each in its modes (`suite.case_modes`: its group's without
    `modes`, else those of `modes` that apply to it; a case none applies to is skipped), micro,
    gemm and attention cases timed in `rounds` interleaved rounds, model cases measured as
    `settings` say (CaseSettings: warm runs, quick, loop steps), each in at most `case_budget_s`
    seconds and all within `budget_s` (a case that would not fit is skipped; a model case is
    stopped at what is left); write bench.json and bench.md to out_dir after each. Exit code: 0
    when every compiled mode of every case passed accuracy, 1 otherwise, 2 without CUDA or for a
    bad argument."""
    import torch

    if not torch.cuda.is_available():
        print("coil bench: needs a CUDA GPU (torch.cuda.is_available() is False); nothing was measured.",
              file=sys.stderr)
        return 2
    settings = settings or CaseSettings()
    try:
        cases = select(names)
        if rounds < 1:
            raise ValueError(f"--rounds must be at least 1, got {rounds}")
        asked = None if modes is None else parse_modes(modes)
        if case_budget_s is not None and case_budget_s <= 0:
            raise ValueError(f"--case-budget-s must be positive, got {case_budget_s}")
        runs = settings.runs()
    except ValueError as exc:
        print(f"coil bench: {exc}", file=sys.stderr)
        return 2
    importlib.import_module(IMPORTED_BEFORE_THE_CLOCK)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    per_case = {name: case_modes(name, asked) for name in cases}
    ran = tuple(m for m in ALL_MODES if any(m in v for v in per_case.values()))
    report = _header(budget_s, rounds, ran, settings, runs, case_budget_s)
    ctx = Ctx(Path(tempfile.mkdtemp(prefix="coil-bench-")))
    start = time.perf_counter()
    ok = True
    models = set(model_cases())
    kernels = kernel_cases()
    for name in cases:
        these = per_case[name]
        if not these:
            report["cases"][name] = {"skipped": "none of the modes asked for applies to it"}
            continue
        elapsed = time.perf_counter() - start
        est = (estimate_s(name, these, quick=settings.quick, warm_runs=runs, apart=settings.mode_processes)
               if name in models
               else kernel_estimate_s(kernels[name], these) if name in kernels else _EST_MICRO)
        if elapsed + min(est, case_budget_s or math.inf) > budget_s:
            report["cases"][name] = {"skipped": f"time budget ({elapsed:.0f} s used of {budget_s:.0f})"}
            print(f"[bench] {name}: skipped (budget)", flush=True)
            continue
        t0 = time.perf_counter()
        print(f"[bench] {name} ...", flush=True)
        if name in models:
            limit = min(case_budget_s or math.inf, budget_s - elapsed)
            run_case = run_modes_apart if settings.mode_processes else run_model_in_process
            res = run_case(name, ctx.root, these, settings, None if math.isinf(limit) else limit)
        elif name in kernels:
            res = run_kernel(kernels[name], ctx, these, rounds)
        else:
            res = run_micro(name, ctx, these, rounds)
        res["case_s"] = time.perf_counter() - t0
        report["cases"][name] = res
        report["copy_gbs"] = ctx.copy_gbs
        ok &= "error" not in res and all(res.get(m, {}).get("accuracy_ok") is True for m in these if m != "eager")
        brief = {m: {k: res.get(m, {}).get(k) for k in ("ms", "first_call_s", "accuracy_ok", "error")} for m in these}
        print(f"[bench] {name} done in {res['case_s']:.0f} s: {json.dumps(brief, default=str)[:600]}", flush=True)
        (out / "bench.json").write_text(json.dumps(report, indent=2, default=str))
        (out / "bench.md").write_text(render(report))
    report["total_s"] = time.perf_counter() - start
    (out / "bench.json").write_text(json.dumps(report, indent=2, default=str))
    md = render(report)
    (out / "bench.md").write_text(md)
    print(md, flush=True)
    return 0 if ok else 1


def _header(budget_s: float, rounds: int, modes: tuple[str, ...], settings: CaseSettings, runs: int,
            case_budget_s: float | None) -> dict[str, Any]:
    """bench.json's head: date, GPU and versions, the run's settings, and an empty `cases`."""
    import torch
    import triton

    tv = None
    with contextlib.suppress(Exception):
        import transformers

        tv = transformers.__version__
    return {
        "date": datetime.date.today().isoformat(), "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
        "triton": triton.__version__, "transformers": tv, "budget_s": budget_s, "copy_gbs": {},
        "precompile": precompile_requested(), "rounds": rounds, "warm_runs": runs, "modes": list(modes),
        "settings": {"modes": ",".join(modes), "first calls": "bench process (quick)" if settings.quick
                     else f"new processes, {runs} warm", "loop steps": settings.loop_steps,
                     "mode processes": "one a mode" if settings.mode_processes else "one a case",
                     "case budget s": case_budget_s, "rounds": rounds},
        "rule": "RMSE(mode vs fp64) <= 3 * RMSE(eager vs fp64) + tol/10; tol 1e-2 bf16, 1e-4 fp32",
        "cases": {},
    }
