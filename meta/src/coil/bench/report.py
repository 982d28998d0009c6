"""`coil bench`'s report: bench.md's tables, the pairs, the targets line by line, and the errors.

`render(report)` gives the Markdown of a run's report (the dict bench.json holds): every row's
time in every mode with the ratios of coil.bench.pairs' PAIRS, their geomeans and the rows where
coil is slower, the model rows mode by mode (loop time, first calls, memory growth, accuracy,
coil's graph counts), each coil_nocg graph's planned against measured peak
(coil.bench.planned_peaks), the micro rows' bandwidth, the gemm and attention rows' TFLOP/s and
their bounds (coil.bench.kernel_report); `targets(report)` the lines that say where coil
stands against eager and TorchInductor in that run (speed, copy bandwidth, first calls cold and
warm, how each warm graph was served, Dynamo's share of a warm start, training reserved
memory growth against the fair peer, graphs whose measured peak is within 5 % of the planned
one, accuracy).
"""

from __future__ import annotations

import math
from typing import Any

from coil.bench import kernel_report, pairs, planned_peaks
from coil.bench.measure import ALL_MODES


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


def _modes(report: dict[str, Any]) -> list[str]:
    """The modes of a run, in ALL_MODES order: the report's `modes`, else those its rows have."""
    ran = report.get("modes") or [m for m in ALL_MODES if any(m in r for r in report["cases"].values())]
    return [m for m in ALL_MODES if m in ran]


def _ratio(res: dict[str, Any], a: str, b: str) -> str:
    x, y = pairs.ms(res, a), pairs.ms(res, b)
    return f"{x / y:.2f}" if x is not None and y is not None else "—"


def _time_table(cases: dict[str, dict[str, Any]], modes: list[str]) -> list[str]:
    """Every row's median time per mode, the PAIRS' ratios and each compiled mode's accuracy."""
    shown = [(a, b) for a, b in pairs.PAIRS if a in modes and b in modes]
    compiled = [m for m in modes if m != "eager"]
    head = ["case", *(f"{m} ms" for m in modes), *(f"{a} / {b}" for a, b in shown),
            "accuracy " + " / ".join(compiled)]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, res in cases.items():
        if "skipped" in res or "error" in res:
            what = f"skipped: {res['skipped']}" if "skipped" in res else f"ERROR: {str(res['error'])[:200]}"
            out.append(f"| {name} | {what} |" + "|" * (len(head) - 2))
            continue
        cells = [name, *(_f(res.get(m, {}).get("ms"), ".3f") for m in modes),
                 *(_ratio(res, a, b) for a, b in shown), " / ".join(_acc(res.get(m, {})) for m in compiled)]
        out.append("| " + " | ".join(cells) + " |")
    return out


def _counts(r: dict[str, Any]) -> str:
    if "graphs_compiled" not in r:
        return "—"
    text = f"{r['graphs_compiled']} / {r['graphs_eager']} / {r['aten_fallbacks']}"
    if r.get("cuda_graphs") or r.get("cuda_graphs_stopped"):
        text += (f"; CUDA graphs {r['cuda_graphs']}, stopped {r['cuda_graphs_stopped']}, "
                 f"uncaptured calls timed {r.get('uncaptured_calls_timed', '—')}")
        if r.get("outputs_copied_away"):
            text += (f", outputs copied away {r['outputs_copied_away']} "
                     f"({r.get('outputs_copied_away_timed', '—')} timed)")
    if r.get("cuda_graph_stops"):
        text += " (why: " + "; ".join(f"{n} x {why}" for why, n in r["cuda_graph_stops"].items()) + ")"
    return text


def _mode_table(cases: dict[str, dict[str, Any]], modes: list[str]) -> list[str]:
    """The model rows mode by mode: times, first calls, memory growth, accuracy, coil's counts."""
    out = ["| case | mode | ms | loop ms | first call s | warm first call s | peak growth MiB alloc / reserved "
           "| accuracy | coil graphs / eager / ATen fallbacks; its CUDA graphs |", "|---|---|---|---|---|---|---|---|---|"]
    for name, res in cases.items():
        if res.get("kind") != "model" or "skipped" in res or "error" in res:
            continue
        for m in modes:
            r = res.get(m, {})
            out.append(
                f"| {name} | {m} | {_f(r.get('ms'), '.3f')} | {_f(r.get('loop_ms'), '.3f')} "
                f"| {_f(r.get('first_call_s'), '.1f')} | {_f(r.get('warm_first_call_s'), '.1f')} "
                f"| {_f(r.get('growth_allocated_mib'), '.0f')} / {_f(r.get('growth_reserved_mib'), '.0f')} "
                f"| {_acc(r)} | {_counts(r)} |")
    return out


def _micro_table(cases: dict[str, dict[str, Any]], modes: list[str]) -> list[str]:
    """The micro rows' achieved bandwidth per compiled mode and its share of the copy's."""
    compiled = [m for m in modes if m != "eager"]
    out = ["| case | GB/s " + " / ".join(compiled) + " | % of copy " + " / ".join(compiled) + " |", "|---|---|---|"]
    for name, res in cases.items():
        if res.get("kind") != "micro" or "skipped" in res:
            continue
        gbs = " / ".join(_f(res.get(m, {}).get("gbs"), ".0f") for m in compiled)
        pct = " / ".join(_f(res.get(m, {}).get("pct_copy"), ".0f") for m in compiled)
        out.append(f"| {name} | {gbs} | {pct} |")
    return out


def render(report: dict[str, Any]) -> str:
    """bench.md: the run's versions and settings, the time table (every row, every mode, the
    PAIRS' ratios), the pairs' geomeans and slower rows, the model rows mode by mode, planned
    against measured peaks (coil_nocg), the micro rows' bandwidth, the targets and the errors."""
    cases: dict[str, dict[str, Any]] = report["cases"]
    modes = _modes(report)
    lines = [f"coil bench — {report['date']}, {report['gpu']}, torch {report['torch']}, Triton {report['triton']}"
             + (f", transformers {report['transformers']}" if report.get("transformers") else ""), ""]
    settings = report.get("settings")
    if settings:
        lines += ["Settings: " + ", ".join(f"{k} {v}" for k, v in settings.items()) + ".", ""]
    if report.get("copy_gbs"):
        lines.append("Device-to-device copy of a 16384x8192 tensor (read + write), same run: "
                     + ", ".join(f"{k} {v:.0f} GB/s" for k, v in report["copy_gbs"].items()) + ".")
        lines.append("")
    lines += ["Median time (do_bench), ms; a / b: a's time over b's (below 1: a is faster).", ""]
    lines += [*_time_table(cases, modes), ""]
    compared = pairs.lines(cases, modes)
    if compared:
        lines += ["Pairs (geometric mean of the rows' time ratios):"] + [f"- {t}" for t in compared] + [""]
    if any(r.get("kind") == "model" and "skipped" not in r and "error" not in r for r in cases.values()):
        lines += ["Model rows by mode (loop: wall-clock ms a step over a loop; growth: the peak over the "
                  "model's own memory; first call: cold, new process unless the run was quick):", ""]
        lines += [*_mode_table(cases, modes), ""]
    peaks = planned_peaks.table(cases)
    if peaks:
        lines += [f"Planned vs measured peak ({planned_peaks.MODE}): planned, the memory planner's peak of the "
                  "order coil runs less the graph's inputs, the inputs the call released (nothing else held "
                  "them) freed after their last read; measured, the largest allocated peak of "
                  "warm calls over the memory allocated before the call (outputs included):", ""]
        lines += [*peaks, ""]
    if any(r.get("kind") == "micro" and "skipped" not in r for r in cases.values()):
        lines += [*_micro_table(cases, modes), ""]
    kernels = kernel_report.table(cases, modes)
    if kernels:
        lines += ["GEMM and attention rows: TFLOP/s (dense-equivalent for masked attention); coil's time over "
                  "its reference row's eager time (bare matmul, unmasked flash attention) and the limit:", ""]
        lines += [*kernels, ""]
    beside = [f"{n} {m}" for n, r in cases.items() for m in ALL_MODES
              if isinstance(r.get(m), dict) and r[m].get("timed_beside_lanes")]
    if beside:
        lines += ["Timed beside other lanes' work (the wait for the lane lock ran out): " + ", ".join(beside), ""]
    lines += ["Targets (from this run):"] + [f"- {t}" for t in targets(report)]
    errors = [f"{n}: {r['error']}" for n, r in cases.items() if "error" in r]
    errors += [f"{n} {m}: {r[m]['error']}" for n, r in cases.items() for m in ALL_MODES
               if isinstance(r.get(m), dict) and "error" in r[m]]
    errors += [f"{n} reference: {r['reference_error']}" for n, r in cases.items() if "reference_error" in r]
    if errors:
        lines += ["", "Errors:"] + [f"- {x[:300]}" for x in errors]
    return "\n".join(lines) + "\n"


def targets(report: dict[str, Any]) -> list[str]:
    cases: dict[str, dict[str, Any]] = report["cases"]
    done = {n: r for n, r in cases.items() if "skipped" not in r}
    micro = {n: r for n, r in done.items() if r.get("kind") == "micro"}
    models = {n: r for n, r in done.items() if r.get("kind") == "model"}
    out: list[str] = []
    # the Inductor mode compile time and memory are judged against: default, else the one run;
    # the coil mode judged: coil, else the coil mode the run has (a `--modes coil_nocg,...` run)
    ran_modes = _modes(report)
    ind = "inductor" if "inductor" in ran_modes or "inductor_ro" not in ran_modes else "inductor_ro"
    mine = next((m for m in ("coil", "coil_nocg", "coil_max") if m in ran_modes), "coil")

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
    timed = {n: s for n, r in models.items() if (s := _speed(r, mine)) is not None}
    if timed:  # rows where eager and the coil mode both ran
        out.append(f"{mine} faster than eager on models: {sum(s > 1 for s in timed.values())}/{len(timed)}")
    if models:
        gi = [s for r in models.values() if (s := _speed(r, "inductor")) is not None]
        gc = [s for r in models.values() if (s := _speed(r, "coil")) is not None]
        if gi and gc and len(gi) == len(gc):
            gmi = math.exp(sum(map(math.log, gi)) / len(gi))
            gmc = math.exp(sum(map(math.log, gc)) / len(gc))
            out.append(f"model geomean speedup over eager: coil {gmc:.2f}x vs Inductor {gmi:.2f}x "
                       f"({'met' if gmc >= gmi else 'not met'})")
    both = {n: (a, b) for n, r in done.items() if isinstance(a := r.get(mine, {}).get("first_call_s"), float)
            and isinstance(b := r.get(ind, {}).get("first_call_s"), float)}
    if both:  # rows where the two modes' first calls were both timed
        comp = [n for n, (a, b) in both.items() if a <= b]
        # quick: each mode's first call ran in the bench's process after the modes before it,
        # which slows a later mode's (coil's cold BART training call, docs/perf.md)
        in_process = str(report.get("settings", {}).get("first calls", "")).startswith("bench process")
        out.append(f"cold first call (compile) {mine} <= {ind}: {len(comp)}/{len(both)} cases"
                   + (f"; models: {', '.join(n for n in models if n in comp) or 'none'}" if models else "")
                   + ("; in the bench's process, each mode after those before it: not a comparison "
                      "(without --quick each first call runs in a new process)" if in_process else ""))
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
    out += _memory_targets({n: r for n, r in models.items() if "train" in n})
    out += planned_peaks.targets(models)
    out += kernel_report.targets(done)
    ran = [m for m in _modes(report) if m != "eager"]
    acc = [f"{n} {m}" for n, r in done.items() for m in ran if m in r and r[m].get("accuracy_ok") is not True]
    out.append("accuracy: all pass" if not acc else f"accuracy failures or errors: {', '.join(acc)}")
    return out


def _memory_targets(trains: dict[str, dict[str, Any]]) -> list[str]:
    """Per fair pair (coil against `inductor_ro`, coil_nocg against `inductor`), on the training
    rows where both modes ran: in how many coil's reserved growth over the model's own memory is
    at most its peer's, and the rows where it is above (MiB). A pair not run says nothing."""
    out = []
    for mine, peer in (("coil", "inductor_ro"), ("coil_nocg", "inductor")):
        both = {n: (a, b) for n, r in trains.items()
                if isinstance(a := r.get(mine, {}).get("growth_reserved_mib"), int | float)
                and isinstance(b := r.get(peer, {}).get("growth_reserved_mib"), int | float)}
        if not both:
            continue
        above = [f"{n} {a:.0f} / {b:.0f}" for n, (a, b) in both.items() if a > b]
        out.append(f"training-step reserved growth {mine} <= {peer}: {len(both) - len(above)}/{len(both)}"
                   + (f"; above: {', '.join(above)}" if above else ""))
    return out


def _dynamo_split(report: dict[str, Any]) -> str:
    """", Dynamo 2.31 s + backend 0.42 s" from a `model_runs.dynamo_report` that has the
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
