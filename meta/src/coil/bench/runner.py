"""`coil bench`: eager, torch.compile default (TorchInductor) and coil side by side, one process
per model case (micro cases share the main process).

For each case, on the same inputs, each mode in turn (in a model case, each mode first frees what
the one before left: its model, gradients and Dynamo code): `torch._dynamo.reset()`, fresh cache
folders (TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR, COIL_CACHE_DIR set to new temp folders before
the compile, in-memory kernel memos cleared), the first call timed from `torch.compile` on (cold
compile + first run; a model case measures it, and the warm one (the median of `--warm-runs`
processes, default 3), in new processes:
`bench_models.new_process_first_call`),
then the median of `triton.testing.do_bench` (CUDA events), the peak memory of one warm iteration
(`torch.cuda.max_memory_reserved` over the call after `empty_cache`: `_warm_peak`; CUDA-graph pools
are memory reserved too; for a model case measured in the mode's warm-start process, which runs
that mode alone: `bench_models.own_process_peak`), and accuracy with the PyTorch benchmark harness's rule against an fp64 reference:
RMSE(mode) <= 3 * RMSE(eager) + tol / 10 (tol 1e-2 for bf16, 1e-4 for fp32). Micro cases are timed after all
modes have compiled, in interleaved rounds (`--rounds`, default 5; coil.bench.rounds): a
mode's time is the median of its rounds, and coil is compared with Inductor round by round. They
also report achieved GB/s (bytes of the inputs read + output written / median time) against a
device-to-device copy of a same-size tensor measured in the same run.

Writes bench.json and bench.md to --out after every case (a run cut short keeps what it measured).
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import json
import math
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coil.bench.models import (
    EST_S,
    MODEL_CASES,
    SPECS,
    compile_mode,
    precompile_requested,
    run_model_in_process,
    warm_runs,
)
from coil.knobs import KNOBS, knobs

if TYPE_CHECKING:
    import torch

ROWS, COLS = 16384, 8192
MODES = ("eager", "inductor", "coil")
MULTIPLIER = 3.0
# interleaved timing rounds of a micro case (coil.bench.rounds; `coil bench --rounds`)
ROUNDS = 5


def _tol(dtype: torch.dtype) -> float:
    import torch

    return 1e-2 if dtype in (torch.bfloat16, torch.float16) else 1e-4


# ----------------------------------------------------------------------------------- the suite


@dataclass(frozen=True)
class Micro:
    """One micro case: fn(*inputs) on inputs made by make(dtype)."""

    base: str
    fn: Callable[..., torch.Tensor]
    make: Callable[[torch.dtype], tuple[torch.Tensor, ...]]


def _randn(*shape: int, dtype: torch.dtype) -> torch.Tensor:
    import torch

    return torch.randn(*shape, device="cuda", dtype=dtype)


def _bias_gelu(x: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    import torch.nn.functional as F

    return F.gelu(x + b)


def _softmax(x: torch.Tensor) -> torch.Tensor:
    import torch

    return torch.softmax(x, dim=-1)


def _layernorm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    import torch.nn.functional as F

    return F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)


def _rmsnorm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    import torch

    xf = x.float() if x.dtype != torch.float64 else x
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)
    return (y * w.to(y.dtype)).to(x.dtype)


def _sum0(x: torch.Tensor) -> torch.Tensor:
    return x.sum(0)


def _sum1(x: torch.Tensor) -> torch.Tensor:
    return x.sum(1)


def _chain(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    import torch

    return torch.sigmoid(x) * y + torch.tanh(z) * 0.5 - (x * z).abs()


def _xent(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    import torch.nn.functional as F

    return F.cross_entropy(logits, target)


def _targets() -> torch.Tensor:
    import torch

    return torch.randint(0, COLS, (ROWS,), device="cuda")


MICRO: tuple[Micro, ...] = (
    Micro("bias_gelu", _bias_gelu, lambda d: (_randn(ROWS, COLS, dtype=d), _randn(COLS, dtype=d))),
    Micro("softmax", _softmax, lambda d: (_randn(ROWS, COLS, dtype=d),)),
    Micro("layernorm", _layernorm, lambda d: (_randn(ROWS, COLS, dtype=d), _randn(COLS, dtype=d), _randn(COLS, dtype=d))),
    Micro("rmsnorm", _rmsnorm, lambda d: (_randn(ROWS, COLS, dtype=d), _randn(COLS, dtype=d))),
    Micro("sum_dim0", _sum0, lambda d: (_randn(ROWS, COLS, dtype=d),)),
    Micro("sum_dim1", _sum1, lambda d: (_randn(ROWS, COLS, dtype=d),)),
    Micro("pointwise_chain", _chain, lambda d: tuple(_randn(ROWS, COLS, dtype=d) for _ in range(3))),
    Micro("cross_entropy", _xent, lambda d: (_randn(ROWS, COLS, dtype=d), _targets())),
)
DTYPES = ("bf16", "fp32")
MODELS = MODEL_CASES
# rough seconds per case on an H200 (all three modes, cold compiles): for --budget-s
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


# ------------------------------------------------------------------------------- measuring


def _rmse(a: torch.Tensor, ref: torch.Tensor) -> float:
    import torch

    return float(torch.sqrt(torch.mean((a.detach().double() - ref.double()) ** 2)))


@contextlib.contextmanager
def _cold(root: Path, tag: str) -> Iterator[dict[str, str]]:
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


def _bench(fn: Callable[[], object], warmup: int, rep: int) -> float:
    import triton

    return float(triton.testing.do_bench(fn, warmup=warmup, rep=rep, return_mode="median"))


def _warm_peak(fn: Callable[[], object]) -> dict[str, Any]:
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


def _coil_graphs() -> list[dict[str, Any]]:
    import coil.backend as cb

    return [{"name": s.name, "kernels": s.kernels, "ir_ops": s.ir_ops, "externs": s.externs,
             "fallbacks": s.fallbacks, "eager_fallback": s.eager_fallback} for s in cb.COMPILED]


class Ctx:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.copy_gbs: dict[str, float] = {}

    def copy_bw(self, dtype_name: str) -> float:
        """GB/s of a device-to-device copy of a ROWS x COLS tensor of this dtype (read + write)."""
        import torch

        if dtype_name not in self.copy_gbs:
            dt = torch.bfloat16 if dtype_name == "bf16" else torch.float32
            src = _randn(ROWS, COLS, dtype=dt)
            dst = torch.empty_like(src)
            ms = _bench(lambda: dst.copy_(src), 25, 200)
            self.copy_gbs[dtype_name] = 2 * src.numel() * src.element_size() / (ms * 1e-3) / 1e9
            del src, dst
        return self.copy_gbs[dtype_name]


def run_micro(name: str, ctx: Ctx, modes: Sequence[str] = MODES, rounds: int = ROUNDS) -> dict[str, Any]:
    """One micro case in every mode: each mode's cold compile and first call, accuracy and warm
    peak in turn; then the modes' times in `rounds` interleaved rounds (coil.bench.rounds),
    each round one `do_bench` median per mode. A mode's `ms` is the median of its rounds
    (`ms_rounds` has them all); `coil_vs_inductor` compares the two round by round."""
    import torch

    base, dname = name.rsplit("_", 1)
    spec = next(m for m in MICRO if m.base == base)
    dtype = torch.bfloat16 if dname == "bf16" else torch.float32
    tol = _tol(dtype)
    copy_gbs = ctx.copy_bw(dname)
    torch.manual_seed(0)
    inputs = spec.make(dtype)
    with torch.no_grad():
        ref = spec.fn(*[t.double() if t.is_floating_point() else t for t in inputs])
        eager_out = spec.fn(*inputs)
    nbytes = sum(t.numel() * t.element_size() for t in inputs) + eager_out.numel() * eager_out.element_size()
    e_rmse = _rmse(eager_out, ref)
    del eager_out
    res: dict[str, Any] = {"kind": "micro", "dtype": dname, "shape": [ROWS, COLS], "bytes": nbytes,
                           "copy_gbs": copy_gbs, "rmse_eager": e_rmse, "tol": tol, "rounds": rounds}
    calls: dict[str, Callable[[], object]] = {}
    for mode in modes:
        r: dict[str, Any] = {}
        try:
            if mode == "coil":
                import coil.backend as cb

                cb.reset()
            with torch.no_grad(), _cold(ctx.root, f"{name}-{mode}"):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                f = compile_mode(spec.fn, mode)
                out = f(*inputs)
                torch.cuda.synchronize()
                r["first_call_s"] = time.perf_counter() - t0
            with torch.no_grad():
                rm = _rmse(out, ref)
                del out
                r["rmse"] = rm
                r["accuracy_ok"] = rm <= MULTIPLIER * e_rmse + tol / 10
                r.update(_warm_peak(functools.partial(f, *inputs)))
            if mode == "coil":
                r["graphs"] = _coil_graphs()
            calls[mode] = functools.partial(f, *inputs)
        except Exception as exc:
            r["error"] = f"{type(exc).__name__}: {exc}"[:800]
            traceback.print_exc()
            torch.cuda.empty_cache()
        res[mode] = r
    _time_in_rounds(res, calls, rounds, nbytes, copy_gbs)
    torch.cuda.empty_cache()
    return res


def _time_in_rounds(res: dict[str, Any], calls: dict[str, Callable[[], object]], rounds: int,
                    nbytes: int, copy_gbs: float) -> None:
    """Each compiled mode's `ms` (median of `rounds` interleaved rounds), GB/s and % of copy into
    `res`, and the round-by-round comparison of coil with Inductor. The cold compiles reset
    Dynamo, so every mode but the last compiles again on its first call here (into the last
    mode's cache folders), outside the timing."""
    import torch
    from coil.bench.rounds import interleaved, paired

    with torch.no_grad():
        for mode, call in list(calls.items()):
            try:
                call()
                torch.cuda.synchronize()
            except Exception as exc:
                res[mode]["error"] = f"timing-phase call: {type(exc).__name__}: {exc}"[:800]
                traceback.print_exc()
                del calls[mode]
        times = interleaved(calls, rounds, lambda call: _bench(call, 25, 100))
    for mode, ms_rounds in times.items():
        r = res[mode]
        r["ms_rounds"] = ms_rounds
        r["ms"] = statistics.median(ms_rounds)
        r["gbs"] = nbytes / (r["ms"] * 1e-3) / 1e9
        r["pct_copy"] = 100 * r["gbs"] / copy_gbs
    if "coil" in times and "inductor" in times:
        res["coil_vs_inductor"] = paired(times["coil"], times["inductor"])


# -------------------------------------------------------------------------------- reporting


def _f(v: object, fmt: str) -> str:
    return format(v, fmt) if isinstance(v, int | float) else "—"


def _acc(r: dict[str, Any]) -> str:
    if "error" in r:
        return "ERROR"
    if "accuracy_ok" not in r:
        return "—"
    return "pass" if r["accuracy_ok"] else "FAIL"


def _speed(res: dict[str, Any], mode: str) -> float | None:
    e, m = res.get("eager", {}).get("ms"), res.get(mode, {}).get("ms")
    return e / m if isinstance(e, float) and isinstance(m, float) and m > 0 else None


def render(report: dict[str, Any]) -> str:
    cases: dict[str, dict[str, Any]] = report["cases"]
    lines = [f"coil bench — {report['date']}, {report['gpu']}, torch {report['torch']}, Triton {report['triton']}"
             + (f", transformers {report['transformers']}" if report.get("transformers") else ""), ""]
    if report["copy_gbs"]:
        lines.append("Device-to-device copy of a 16384x8192 tensor (read + write), same run: "
                     + ", ".join(f"{k} {v:.0f} GB/s" for k, v in report["copy_gbs"].items()) + ".")
        lines.append("")
    lines += ["| case | eager ms | inductor ms | coil ms | inductor x eager | coil x eager | coil / inductor time "
              "| first call s (ind / coil) | warm peak MiB (eager / ind / coil) | GB/s ind / coil | % of copy ind / coil "
              "| accuracy ind / coil |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, res in cases.items():
        if "skipped" in res:
            lines.append(f"| {name} | skipped: {res['skipped']} |||||||||||")
            continue
        e, i, c = (res.get(m, {}) for m in ("eager", "inductor", "coil"))
        si, sc = _speed(res, "inductor"), _speed(res, "coil")
        ratio = c["ms"] / i["ms"] if isinstance(c.get("ms"), float) and isinstance(i.get("ms"), float) else None
        micro = res.get("kind") == "micro"
        lines.append(
            f"| {name} | {_f(e.get('ms'), '.3f')} | {_f(i.get('ms'), '.3f')} | {_f(c.get('ms'), '.3f')} "
            f"| {_f(si, '.2f')}x | {_f(sc, '.2f')}x | {_f(ratio, '.2f')} "
            f"| {_f(i.get('first_call_s'), '.1f')} / {_f(c.get('first_call_s'), '.1f')} "
            f"| {_f(e.get('peak_mib'), '.0f')} / {_f(i.get('peak_mib'), '.0f')} / {_f(c.get('peak_mib'), '.0f')} "
            f"| {(_f(i.get('gbs'), '.0f') + ' / ' + _f(c.get('gbs'), '.0f')) if micro else '—'} "
            f"| {(_f(i.get('pct_copy'), '.0f') + ' / ' + _f(c.get('pct_copy'), '.0f')) if micro else '—'} "
            f"| {_acc(i)} / {_acc(c)} |")
    lines.append("")
    lines += ["Issue-5 targets (from this run):"] + [f"- {t}" for t in targets(report)]
    errors = [f"{n} {m}: {r[m]['error']}" for n, r in cases.items() for m in MODES if "error" in r.get(m, {})]
    if errors:
        lines += ["", "Errors:"] + [f"- {x[:300]}" for x in errors]
    return "\n".join(lines) + "\n"


def targets(report: dict[str, Any]) -> list[str]:
    cases: dict[str, dict[str, Any]] = report["cases"]
    done = {n: r for n, r in cases.items() if "skipped" not in r}
    micro = {n: r for n, r in done.items() if r.get("kind") == "micro"}
    models = {n: r for n, r in done.items() if r.get("kind") == "model"}
    out: list[str] = []

    def ms(r: dict[str, Any], m: str) -> float | None:
        v = r.get(m, {}).get("ms")
        return v if isinstance(v, float) else None

    if micro:
        beat = [n for n, r in micro.items() if (a := ms(r, "coil")) is not None and (b := ms(r, "inductor")) is not None and a <= b]
        out.append(f"coil >= Inductor on micro cases: {len(beat)}/{len(micro)}"
                   + (f" (met: {', '.join(beat)})" if beat and len(beat) < len(micro) else ""))
        behind = [f"{n} {p['median_ratio']:.3f}, not slower in {p['a_not_slower']}/{p['rounds']} rounds"
                  for n, r in micro.items() if n not in beat and (p := r.get("coil_vs_inductor"))]
        if behind:
            out.append("micro cases behind, coil / Inductor time (median of the rounds' ratios): " + "; ".join(behind))
        bw = [n for n, r in micro.items() if r.get("coil", {}).get("pct_copy", 0) >= 85]
        out.append(f"coil >= 85 % of copy bandwidth: {len(bw)}/{len(micro)}"
                   + (f" (met: {', '.join(bw)})" if bw and len(bw) < len(micro) else ""))
    if models:
        faster = [n for n, r in models.items() if (s := _speed(r, "coil")) is not None and s > 1]
        out.append(f"coil faster than eager on models: {len(faster)}/{len(models)}")
        gi = [s for r in models.values() if (s := _speed(r, "inductor")) is not None]
        gc = [s for r in models.values() if (s := _speed(r, "coil")) is not None]
        if gi and gc and len(gi) == len(gc):
            gmi = math.exp(sum(map(math.log, gi)) / len(gi))
            gmc = math.exp(sum(map(math.log, gc)) / len(gc))
            out.append(f"model geomean speedup over eager: coil {gmc:.2f}x vs Inductor {gmi:.2f}x "
                       f"({'met' if gmc >= gmi else 'not met'})")
    comp = [n for n, r in done.items()
            if isinstance(a := r.get("coil", {}).get("first_call_s"), float)
            and isinstance(b := r.get("inductor", {}).get("first_call_s"), float) and a <= b]
    out.append(f"cold first call (compile) coil <= Inductor: {len(comp)}/{len(done)} cases"
               + (f"; models: {', '.join(n for n in models if n in comp) or 'none'}" if models else ""))
    warm = [f"{n} {m} {w:.1f}/{c:.1f} s ({w / c:.2f})" for n, r in models.items() for m in ("inductor", "coil")
            if isinstance(w := r.get(m, {}).get("warm_first_call_s"), float)
            and isinstance(c := r.get(m, {}).get("first_call_s"), float)]
    if warm:
        out.append("warm-cache / cold first call (new processes; warm: the median of "
                   f"{_warm_runs_of(models)}): " + "; ".join(warm))
        quarter = [n for n, r in models.items() if isinstance(w := r.get("coil", {}).get("warm_first_call_s"), float)
                   and isinstance(c := r.get("coil", {}).get("first_call_s"), float) and w <= 0.25 * c]
        out.append(f"coil's warm start <= 25 % of its cold one: {len(quarter)}/{len(models)}"
                   + (f" (met: {', '.join(quarter)})" if quarter and len(quarter) < len(models) else ""))
    verdicts = [f"{n} " + ",".join(_warm_verdict(g) for g in caches) for n, r in models.items()
                if (caches := r.get("coil", {}).get("warm_graph_caches"))]
    if verdicts:
        out.append("coil's warm start, per graph (frontend cache hit, else torch's AOT cache): " + "; ".join(verdicts))
    dynamo = [f"{n} {m} traced {d.get('traced')}" + (" (package hit)" if d.get("cache", {}).get("dynamo_cache_hit") else "")
              + _dynamo_split(d) for n, r in models.items() for m in ("inductor", "coil")
              if (d := r.get(m, {}).get("dynamo_warm"))]
    if dynamo:
        out.append("Dynamo in the (first) warm-start process, graphs traced: " + "; ".join(dynamo))
    trains = {n: r for n, r in models.items() if "train" in n}
    if trains:
        pm = [n for n, r in trains.items() if isinstance(a := r.get("coil", {}).get("peak_mib"), float)
              and isinstance(b := r.get("inductor", {}).get("peak_mib"), float) and a <= b]
        out.append(f"training-step peak memory coil <= Inductor: {len(pm)}/{len(trains)}")
    acc = [f"{n} {m}" for n, r in done.items() for m in ("inductor", "coil") if r.get(m, {}).get("accuracy_ok") is not True]
    out.append("accuracy: all pass" if not acc else f"accuracy failures or errors: {', '.join(acc)}")
    return out


def _dynamo_split(report: dict[str, Any]) -> str:
    """", Dynamo 2.31 s + backend 0.42 s" from a `bench_models.dynamo_report` that has the
    split, else ""."""
    trace, backend = report.get("trace_s"), report.get("backend_s")
    if not isinstance(trace, int | float) or not isinstance(backend, int | float):
        return ""
    return f", Dynamo {trace:.2f} s + backend {backend:.2f} s"


def _warm_verdict(graph: dict[str, Any]) -> str:
    """How a graph of a warm start was served: "frontend hit", else torch's AOT-cache verdict."""
    return "frontend hit" if graph.get("frontend_cache") == "hit" else str(graph.get("aot_cache"))


def _warm_runs_of(models: dict[str, dict[str, Any]]) -> str:
    """How many warm-start processes the models' figures are the median of ("3", or "1-3" when
    cases differ)."""
    counts = sorted({len(runs) for r in models.values() for m in ("inductor", "coil")
                     if isinstance(runs := r.get(m, {}).get("warm_first_call_runs_s"), list)} or {1})
    return str(counts[0]) if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"


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
    import coil.backend  # noqa: F401  (registers backend="coil")
    import triton

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
