"""`coil bench`'s report: bench.md's table, the targets line by line, and the errors.

`render(report)` gives the Markdown of a run's report (the dict bench.json holds); `targets(report)`
the lines that say where coil stands against eager and TorchInductor in that run (speed, copy
bandwidth, first calls cold and warm, how each warm graph was served, Dynamo's share of a warm
start, training peak memory, accuracy).
"""

from __future__ import annotations

import math
from typing import Any

from coil.bench.measure import MODES


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
    lines += ["Targets (from this run):"] + [f"- {t}" for t in targets(report)]
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
