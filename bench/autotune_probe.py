"""Autotuning on and off, side by side: per case the median time, the cold compile and each kernel's choice.

    python bench/autotune_probe.py [--cases rmsnorm,layernorm,softmax,sum_dim0,sum_dim1,cross_entropy]
                                   [--dtypes bf16,fp32] [--rows R --cols C] [--json PATH]

The cases are `coil bench`'s micro cases (coil.backend.bench.MICRO: the same functions and input
shapes, 16384 x 8192 on a GPU). For each case and dtype, coil compiles twice, COIL_AUTOTUNE=0
then on, each time in fresh cache folders (COIL_CACHE_DIR, TRITON_CACHE_DIR, TORCHINDUCTOR_CACHE_DIR;
Dynamo reset, coil's kernel and tuning memos cleared: `coil.backend.bench._cold`), so both compile
times are cold and the "on" one includes compiling and timing every candidate. Reported per run:

- first call s: the cold compile plus the first run (wall clock), and coil's own compile stages
  (GraphStats.stage_times, of which "autotune");
- ms: the median of `triton.testing.do_bench` (CUDA events; inference graphs replay as CUDA
  graphs by default, in both runs);
- tuned / switched kernels (GraphStats.autotuned / autotune_switched) and the largest difference
  between the two runs' outputs (both also against eager);
- per tuned kernel, the configuration kept, and (COIL_LOGS=autotune) every candidate's time and
  any candidate discarded as computing other values (a WARNING: that would be a miscompile).

Without a GPU it runs on the CPU under Triton's interpreter as a smoke check (tiny shapes, 32 x 256
unless --rows/--cols; COIL_AUTOTUNE=always, since "on" means GPU only; wall-clock times, which
say nothing about speed).

On the H200 (after installing the wheels as docs/perf.md describes, or with every src/ on
PYTHONPATH):

    python bench/autotune_probe.py --json autotune_probe.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

CASES = ("rmsnorm", "layernorm", "softmax", "sum_dim0", "sum_dim1", "cross_entropy")
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


class Collect(logging.Handler):
    """Keeps the `coil` loggers' records (autotune choices at INFO, discarded candidates at WARNING)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"[{record.name} {record.levelname}] {record.getMessage()}")


@contextlib.contextmanager
def _sizes(rows: int, cols: int, device: torch.device) -> Iterator[None]:
    """`coil bench`'s input makers at another size and device (they read these module globals)."""
    import coil.backend.bench as bench

    saved = bench.ROWS, bench.COLS, bench._randn, bench._targets
    bench.ROWS, bench.COLS = rows, cols
    bench._randn = lambda *shape, dtype: torch.randn(*shape, device=device, dtype=dtype)  # type: ignore[assignment]
    bench._targets = lambda: torch.randint(0, cols, (rows,), device=device)  # type: ignore[assignment]
    try:
        yield
    finally:
        bench.ROWS, bench.COLS, bench._randn, bench._targets = saved


def _median_ms(fn: Callable[[], object], cuda: bool) -> float:
    if cuda:
        import triton.testing

        return float(triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median"))
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def _sync(cuda: bool) -> None:
    if cuda:
        torch.cuda.synchronize()


def _run(fn: Callable[..., torch.Tensor], inputs: tuple[torch.Tensor, ...], setting: str, root: Path, tag: str,
         cuda: bool, log: Collect) -> tuple[dict[str, Any], torch.Tensor]:
    """Compile `fn` cold with COIL_AUTOTUNE=`setting` and measure it."""
    import coil.backend as cb
    from coil.backend.bench import _cold
    from coil.runtime import autotune

    cb.reset()
    autotune.clear_memo()
    log.lines.clear()
    logs = "autotune" if setting != "0" else ""
    with torch.no_grad(), _cold(root, tag), cb.knobs.override(autotune=setting, logs=logs, fallback_on_error=False):
        compiled = torch.compile(fn, backend="coil")
        _sync(cuda)
        t0 = time.perf_counter()
        out = compiled(*inputs)
        _sync(cuda)
        first = time.perf_counter() - t0
    with torch.no_grad():
        ms = _median_ms(lambda: compiled(*inputs), cuda)
    stats = list(cb.COMPILED)
    stages: dict[str, float] = {}
    for s in stats:
        for k, v in s.stage_times.items():
            stages[k] = stages.get(k, 0.0) + v
    return {
        "ms": ms, "first_call_s": first, "coil_compile_s": sum(stages.values()),
        "autotune_s": stages.get("autotune", 0.0), "kernels": sum(s.kernels for s in stats),
        "tuned": sum(s.autotuned for s in stats), "switched": sum(s.autotune_switched for s in stats),
        "choices": {f"{s.name}/{k}": v for s in stats for k, v in s.autotune_choices.items()},
        "eager_fallback": [s.eager_fallback for s in stats if s.eager_fallback],
        "log": list(log.lines),
    }, out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--dtypes", default=",".join(DTYPES))
    p.add_argument("--rows", type=int, default=None)
    p.add_argument("--cols", type=int, default=None)
    p.add_argument("--json", default=None, help="write every figure here")
    args = p.parse_args(argv)

    import coil.backend  # noqa: F401  (registers backend="coil")
    from coil.backend.bench import MICRO

    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    rows = args.rows or (16384 if cuda else 32)
    cols = args.cols or (8192 if cuda else 256)
    on = "1" if cuda else "always"
    import triton

    where = torch.cuda.get_device_name() if cuda else "CPU, Triton interpreter (smoke check: times mean nothing)"
    print(f"autotune probe: {where}; torch {torch.__version__}, Triton {triton.__version__}; "
          f"{rows} x {cols}; COIL_AUTOTUNE=0 vs {on}", flush=True)
    log = Collect()
    logging.getLogger("coil").addHandler(log)  # also keeps logs.py from adding a stderr handler
    root = Path(tempfile.mkdtemp(prefix="coil-autotune-probe-"))
    report: dict[str, Any] = {"device": where, "torch": torch.__version__, "triton": triton.__version__,
                              "shape": [rows, cols], "on": on, "cases": {}}
    names = [c for c in args.cases.split(",") if c]
    rows_out = []
    for dname in [d for d in args.dtypes.split(",") if d]:
        for base in names:
            spec = next(m for m in MICRO if m.base == base)
            name = f"{base}_{dname}"
            torch.manual_seed(0)
            with _sizes(rows, cols, device):
                inputs = spec.make(DTYPES[dname])
            with torch.no_grad():
                eager = spec.fn(*inputs)
            res: dict[str, Any] = {}
            outs = {}
            for setting in ("0", on):
                key = "off" if setting == "0" else "on"
                try:
                    res[key], outs[key] = _run(spec.fn, inputs, setting, root, f"{name}-{key}", cuda, log)
                    res[key]["err_vs_eager"] = float((outs[key].double() - eager.double()).abs().max())
                except Exception as exc:  # keep going: report it
                    res[key] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
            if "off" in outs and "on" in outs:
                res["max_diff_on_vs_off"] = float((outs["on"].double() - outs["off"].double()).abs().max())
            report["cases"][name] = res
            off, on_ = res.get("off", {}), res.get("on", {})
            line = (f"{name:22s} off {off.get('ms', float('nan')):8.4f} ms  on {on_.get('ms', float('nan')):8.4f} ms"
                    f"  ({off.get('ms', float('nan')) / on_.get('ms', float('nan')):.3f}x)"
                    f"  first call {off.get('first_call_s', float('nan')):5.1f} / {on_.get('first_call_s', float('nan')):5.1f} s"
                    f" (autotune {on_.get('autotune_s', float('nan')):.1f} s)"
                    f"  tuned {on_.get('tuned', '-')} switched {on_.get('switched', '-')}"
                    f"  |on-off| {res.get('max_diff_on_vs_off', float('nan')):.3g}")
            rows_out.append(line)
            print(line, flush=True)
            for k in ("off", "on"):
                if "error" in res[k] or res[k].get("eager_fallback"):
                    print(f"    {k}: {res[k].get('error') or res[k]['eager_fallback']}", flush=True)
            for kernel, choice in on_.get("choices", {}).items():
                print(f"    {kernel}: {choice}", flush=True)
            for entry in on_.get("log", []):
                print("      " + entry.replace("\n", "\n      "), flush=True)
            if args.json:
                Path(args.json).write_text(json.dumps(report, indent=2, default=str))
    print("\nsummary (off ms / on ms, first call off / on):")
    print("\n".join(rows_out))
    return 0 if all("error" not in r.get(k, {}) for r in report["cases"].values() for k in ("off", "on")) else 1


if __name__ == "__main__":
    sys.exit(main())
