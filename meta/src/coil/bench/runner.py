"""`coil bench`: eager, torch.compile default (TorchInductor) and coil side by side.

The suite is the micro cases (coil.bench.micro: fused operations, run in this process) and the
model cases (coil.bench.models, each measured in a process of its own by coil.bench.model_runs).
For each case, on the same inputs, each mode in turn: `torch._dynamo.reset()`, fresh cache folders
(TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR, COIL_CACHE_DIR set to new temp folders before the
compile, in-memory kernel memos cleared: `measure.cold_caches`), the first call timed from
`torch.compile` on (for a model case cold and warm, each in new processes), then the median of
`triton.testing.do_bench` (CUDA events), the peak memory of one warm iteration
(`measure.warm_peak`), and accuracy with the PyTorch benchmark harness's rule against an fp64
reference: RMSE(mode) <= 3 * RMSE(eager) + tol / 10.

`run` writes bench.json and bench.md (coil.bench.report) to --out after every case (a run cut
short keeps what it measured); `select` expands case names and groups; `suite_names` lists them.
"""

from __future__ import annotations

import contextlib
import datetime
import importlib
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from coil.bench.measure import MODES
from coil.bench.micro import DTYPES, MICRO, ROUNDS, Ctx, run_micro
from coil.bench.model_runs import precompile_requested, run_model_in_process, warm_runs
from coil.bench.models import EST_S, IMPORTED_BEFORE_THE_CLOCK, MODEL_CASES, SPECS
from coil.bench.report import render

MODELS = MODEL_CASES
# rough seconds a case takes (all three modes, cold compiles): what --budget-s counts on
_EST = EST_S
_EST_MICRO = 15.0


def suite_names() -> list[str]:
    """Every case name, in run order."""
    return [f"{m.base}_{d}" for d in DTYPES for m in MICRO] + list(MODELS)


def select(names: Sequence[str]) -> list[str]:
    """Expand names (exact, a micro base name such as 'softmax', 'micro', 'models', 'all')."""
    every = suite_names()
    if not names:
        return every
    out: list[str] = []
    for n in names:
        if n == "all":
            hit = every
        elif n == "micro":
            hit = [c for c in every if c not in MODELS]
        elif n == "models":
            hit = list(MODELS)
        elif n in SPECS:
            hit = [c for c in MODELS if c.startswith(n + "_")]
        else:
            hit = [c for c in every if c == n or c.rsplit("_", 1)[0] == n]
        if not hit:
            raise ValueError(f"unknown case {n!r}; known: {', '.join(every)}")
        out += [c for c in hit if c not in out]
    return out


def run(names: Sequence[str], out_dir: str, budget_s: float = 480.0, modes: Sequence[str] = MODES,
        rounds: int = ROUNDS) -> int:
    """Run the selected cases in `modes` (a subset of MODES, in MODES's order), micro cases timed
    in `rounds` interleaved rounds; write bench.json and bench.md to out_dir after each. Exit code."""
    import torch

    if not torch.cuda.is_available():
        print("coil bench: needs a CUDA GPU (torch.cuda.is_available() is False); nothing was measured.",
              file=sys.stderr)
        return 2
    try:
        cases = select(names)
        if rounds < 1:
            raise ValueError(f"--rounds must be at least 1, got {rounds}")
        bad = [m for m in modes if m not in MODES]
        if bad or not modes:
            raise ValueError(f"unknown modes {bad} (known: {', '.join(MODES)})" if bad else "no modes")
        modes = tuple(m for m in MODES if m in modes)
    except ValueError as exc:
        print(f"coil bench: {exc}", file=sys.stderr)
        return 2
    import triton

    importlib.import_module(IMPORTED_BEFORE_THE_CLOCK)

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tv = None
    with contextlib.suppress(Exception):
        import transformers

        tv = transformers.__version__
    report: dict[str, Any] = {
        "date": datetime.date.today().isoformat(), "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
        "triton": triton.__version__, "transformers": tv, "budget_s": budget_s, "copy_gbs": {},
        "precompile": precompile_requested(), "rounds": rounds, "warm_runs": warm_runs(),
        "rule": "RMSE(mode vs fp64) <= 3 * RMSE(eager vs fp64) + tol/10; tol 1e-2 bf16, 1e-4 fp32",
        "cases": {},
    }
    ctx = Ctx(Path(tempfile.mkdtemp(prefix="coil-bench-")))
    start = time.perf_counter()
    ok = True
    for name in cases:
        elapsed = time.perf_counter() - start
        est = _EST.get(name, _EST_MICRO)
        if elapsed + est > budget_s:
            report["cases"][name] = {"skipped": f"time budget ({elapsed:.0f} s used of {budget_s:.0f})"}
            print(f"[bench] {name}: skipped (budget)", flush=True)
            continue
        t0 = time.perf_counter()
        print(f"[bench] {name} ...", flush=True)
        if name in MODELS:
            res = run_model_in_process(name, ctx.root, tuple(modes))
        else:
            res = run_micro(name, ctx, modes, rounds)
        res["case_s"] = time.perf_counter() - t0
        report["cases"][name] = res
        report["copy_gbs"] = ctx.copy_gbs
        ok &= all(res.get(m, {}).get("accuracy_ok") is True for m in ("inductor", "coil") if m in modes)
        brief = {m: {k: res.get(m, {}).get(k) for k in ("ms", "first_call_s", "accuracy_ok", "error")} for m in modes}
        print(f"[bench] {name} done in {res['case_s']:.0f} s: {json.dumps(brief, default=str)[:600]}", flush=True)
        (out / "bench.json").write_text(json.dumps(report, indent=2, default=str))
        (out / "bench.md").write_text(render(report))
    report["total_s"] = time.perf_counter() - start
    (out / "bench.json").write_text(json.dumps(report, indent=2, default=str))
    md = render(report)
    (out / "bench.md").write_text(md)
    print(md, flush=True)
    return 0 if ok else 1
