"""The memory planner's predicted peak against the measured allocated peak, per compiled graph.

In the `coil_nocg` mode of a model case (CUDA graphs off: graphs run as plain launches and
allocate as they go), `check(step)` runs `MEASURED_CALLS` warm steps with
`coil.backend.measure_peaks` on, then compares each graph coil compiled in the process
(`graph_rows`): planned, the planner's peak of the order the wrapper runs less the graph's
inputs, counting the inputs the measured call released after their last read as freed there
(`GraphStats.measured_planned`; `planned_growth`, which keeps every input, where the graph has no
profile of its order): what a call adds to the memory held before it; measured,
the largest allocated peak of those calls over the memory allocated before each
(`GraphStats.measured_peak`, returned outputs included); and measured / planned.
coil.backend.debug.peaks says exactly what the prediction counts and what it leaves out.

The mode's row in bench.json holds `peak_check` (`report`: the rows, how many graphs have both
figures and how many of those are within `TOLERANCE`); bench.md shows `table` and the
`targets` line ("k of n graphs within 5 %", per model).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from coil.backend.debug.peaks import MEASURED_CALLS
from coil.backend.stats import GraphStats

__all__ = ["MODE", "TOLERANCE", "check", "graph_rows", "report", "table", "targets"]

# the mode whose graphs run uncaptured, so that their allocations can be measured
MODE = "coil_nocg"
# agreement: |measured - planned| / planned below this
TOLERANCE = 0.05
_MIB = 2**20


def check(step: Callable[[], object], calls: int = MEASURED_CALLS) -> dict[str, Any]:
    """Run `step` `calls` times with coil.backend.measure_peaks on (off again afterwards, also
    when a step raises) and `report` what coil compiled in this process (coil.backend.COMPILED)."""
    import coil.backend as cb

    cb.measure_peaks(True)
    try:
        for _ in range(calls):
            step()
    finally:
        cb.measure_peaks(False)
    return report(cb.COMPILED)


def graph_rows(stats: Sequence[GraphStats]) -> list[dict[str, Any]]:
    """One row per graph: `graph`, `planned_bytes` (`measured_planned`, else `planned_growth`),
    `inputs_bytes` (`planned_inputs`), `released_bytes` (`measured_released`: the inputs the
    measured call freed after their last read), `measured_bytes` (`measured_peak`), the same four
    in MiB, `ratio`
    (measured / planned; None when a figure is missing or planned is 0 with measured not), and
    `within` (|measured - planned| < TOLERANCE * planned, or equal; None when a figure is missing).
    A row without both figures says why in `missing`."""
    rows = []
    for s in stats:
        planned = s.measured_planned if s.measured_planned is not None else s.planned_growth
        measured = s.measured_peak
        row: dict[str, Any] = {"graph": s.name, "planned_bytes": planned, "inputs_bytes": s.planned_inputs,
                               "released_bytes": s.measured_released, "measured_bytes": measured,
                               "planned_mib": _mib(planned), "inputs_mib": _mib(s.planned_inputs),
                               "released_mib": _mib(s.measured_released), "measured_mib": _mib(measured),
                               "ratio": None, "within": None}
        if s.eager_fallback is not None:
            row["missing"] = "ran eagerly after a compile error"
        elif planned is None:
            row["missing"] = "no planned peak (fewer than 3 steps, symbolic sizes or COIL_ORDER_TIME=0)"
        elif measured is None:
            row["missing"] = "not measured (no call while measuring was on)"
        else:
            row["ratio"] = measured / planned if planned > 0 else (1.0 if measured == 0 else None)
            row["within"] = measured == planned or abs(measured - planned) < TOLERANCE * planned
        rows.append(row)
    return rows


def report(stats: Sequence[GraphStats]) -> dict[str, Any]:
    """`peak_check` of a mode's row: `graphs` (`graph_rows`), `compared` (rows with both
    figures), `within` (of those, the rows within `TOLERANCE`), `tolerance`."""
    rows = graph_rows(stats)
    compared = [r for r in rows if r["within"] is not None]
    return {"graphs": rows, "compared": len(compared), "within": sum(1 for r in compared if r["within"]),
            "tolerance": TOLERANCE}


def _mib(n: int | None) -> float | None:
    return None if n is None else round(n / _MIB, 3)


def _cell(v: object, fmt: str) -> str:
    return format(v, fmt) if isinstance(v, int | float) else "—"


def _checks(cases: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The `peak_check` of each model case's MODE row that has one, by case name."""
    return {n: pc for n, r in cases.items() if r.get("kind") == "model"
            and isinstance(pc := r.get(MODE, {}).get("peak_check"), dict)}


def table(cases: dict[str, dict[str, Any]]) -> list[str]:
    """bench.md's table: each model case's graphs with planned and measured MiB and their ratio
    (a missing figure's reason in the last column); [] when no case has a `peak_check`."""
    checks = _checks(cases)
    if not checks:
        return []
    out = ["| case | graph | planned MiB | measured MiB | measured / planned | inputs MiB | released MiB |",
           "|---|---|---|---|---|---|---|"]
    for name, pc in checks.items():
        for g in pc.get("graphs", []):
            ratio = _cell(g.get("ratio"), ".3f") if "missing" not in g else g["missing"]
            out.append(f"| {name} | {g.get('graph')} | {_cell(g.get('planned_mib'), '.2f')} "
                       f"| {_cell(g.get('measured_mib'), '.2f')} | {ratio} | {_cell(g.get('inputs_mib'), '.2f')} "
                       f"| {_cell(g.get('released_mib'), '.2f')} |")
    return out


def targets(cases: dict[str, dict[str, Any]]) -> list[str]:
    """The Targets line: graphs whose measured peak is within TOLERANCE of the planned one, k of
    n over every case, then per case; [] when no case has a `peak_check`."""
    checks = _checks(cases)
    if not checks:
        return []
    k = sum(int(pc.get("within", 0)) for pc in checks.values())
    n = sum(int(pc.get("compared", 0)) for pc in checks.values())
    per = "; ".join(f"{name} {pc.get('within', 0)}/{pc.get('compared', 0)}" for name, pc in checks.items())
    return [f"{MODE} graphs whose measured peak is within {TOLERANCE * 100:.0f} % of the planned peak: {k} of {n} ({per})"]
