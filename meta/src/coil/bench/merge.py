"""One report from several `coil bench` runs over disjoint cases (one run a GPU, in parallel).

`merge(reports, order)` joins the reports' `cases` into one report, in `order` (the case names
in run order; a case no run wrote is absent), under the first report's head (date, GPU,
versions, settings: runs merged must share them, so a differing torch, Triton, GPU or mode list
is a ValueError naming the field); `total_s` is the longest run's, `lanes` the number of runs.
`merge_dirs(dirs, out, order)` reads each folder's bench.json, writes the merged bench.json and
bench.md (coil.bench.report) to `out` and returns the report.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from coil.bench.report import render

__all__ = ["merge", "merge_dirs"]

# head fields every merged run must agree on: figures from different machines or modes do not mix
_SHARED = ("gpu", "torch", "triton", "transformers", "modes", "settings")


def merge(reports: Sequence[dict[str, Any]], order: Sequence[str] = ()) -> dict[str, Any]:
    """The reports' cases in one report (module docstring). ValueError for no report, a head
    field that differs, or a case that two reports both hold."""
    if not reports:
        raise ValueError("no report to merge")
    head = reports[0]
    for r in reports[1:]:
        for key in _SHARED:
            if r.get(key) != head.get(key):
                raise ValueError(f"cannot merge runs whose {key!r} differ: {head.get(key)!r} and {r.get(key)!r}")
    cases: dict[str, Any] = {}
    for r in reports:
        for name, res in r["cases"].items():
            if name in cases:
                raise ValueError(f"case {name!r} is in two of the runs merged")
            cases[name] = res
    ranked = [n for n in order if n in cases] + [n for n in cases if n not in order]
    out = {k: v for k, v in head.items() if k != "cases"}
    copy: dict[str, Any] = {}
    for r in reports:
        copy.update(r.get("copy_gbs") or {})
    out["copy_gbs"] = copy
    out["total_s"] = max((r.get("total_s", 0.0) for r in reports), default=0.0)
    out["lanes"] = len(reports)
    out["cases"] = {n: cases[n] for n in ranked}
    return out


def merge_dirs(dirs: Sequence[str | Path], out_dir: str | Path, order: Sequence[str] = ()) -> dict[str, Any]:
    """Merge each folder's bench.json (a folder without one is left out: its run wrote nothing)
    into `out_dir`'s bench.json and bench.md; the merged report. ValueError as `merge`."""
    reports = [json.loads(p.read_text()) for d in dirs if (p := Path(d) / "bench.json").is_file()]
    report = merge(reports, order)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json").write_text(json.dumps(report, indent=2, default=str))
    (out / "bench.md").write_text(render(report))
    return report
