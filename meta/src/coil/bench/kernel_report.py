"""bench.md's part on the gemm and attention rows (coil.bench.kernel_runs).

- `bounded(cases)`: each row that names a `reference_case` present in the run, against it:
  coil's time in the row over the reference row's eager time, and the row's `limit` (a fused
  GEMM's coil time over its bare cuBLAS matmul's: at most 1.03, the epilogue free; a padded
  attention's over unmasked flash attention's: at most 1). The two rows were timed one after the
  other, not in interleaved rounds.
- `table(cases, modes)`: the rows' TFLOP/s per mode (dense-equivalent for masked attention) and
  their bounded ratio.
- `targets(cases)`: where coil and `coil_max` stand on these rows: against `inductor_max` and eager
  on the gemm rows, against `flex` on the attention rows, and the bounded ratios met.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from coil.bench import pairs

__all__ = ["bounded", "rows", "table", "targets"]


def rows(cases: Mapping[str, Mapping[str, Any]], group: str | None = None) -> dict[str, Mapping[str, Any]]:
    """The gemm and attention rows that ran (not skipped, no error), or those of one group."""
    return {n: r for n, r in cases.items() if r.get("kind") == "kernel" and "skipped" not in r and "error" not in r
            and (group is None or r.get("group") == group)}


def bounded(cases: Mapping[str, Mapping[str, Any]]) -> dict[str, tuple[float, float]]:
    """Row name -> (coil's time / the reference row's eager time, the row's limit), for the rows
    whose reference row is in `cases` and where both times exist."""
    out: dict[str, tuple[float, float]] = {}
    for name, res in rows(cases).items():
        ref = cases.get(str(res.get("reference_case")))
        mine, base = pairs.ms(res, "coil"), (pairs.ms(ref, "eager") if ref is not None else None)
        if mine is not None and base is not None:
            out[name] = (mine / base, float(res.get("limit") or 1.0))
    return out


def _f(v: object) -> str:
    return f"{v:.0f}" if isinstance(v, int | float) else "—"


def table(cases: Mapping[str, Mapping[str, Any]], modes: list[str]) -> list[str]:
    """The kernel rows' TFLOP/s per mode and their bounded ratio; [] without kernel rows."""
    ran = rows(cases)
    if not ran:
        return []
    limits = bounded(cases)
    out = ["| case | TFLOP/s " + " / ".join(modes) + " | coil / reference eager (limit) |", "|---|---|---|"]
    for name, res in ran.items():
        tf = " / ".join(_f(res.get(m, {}).get("tflops")) for m in modes)
        lim = f"{limits[name][0]:.3f} ({limits[name][1]:g}) vs {res['reference_case']}" if name in limits else "—"
        out.append(f"| {name} | {tf} | {lim} |")
    return out


def _beats(group: Mapping[str, Mapping[str, Any]], a: str, b: str) -> tuple[list[str], list[str]]:
    """The rows where `a` took no longer than `b`, and the rows where both ran."""
    both = [n for n, r in group.items() if pairs.ms(r, a) is not None and pairs.ms(r, b) is not None]
    return [n for n in both if (pairs.ms(group[n], a) or 0.0) <= (pairs.ms(group[n], b) or 0.0)], both


def _line(what: str, met: list[str], both: list[str], group: Mapping[str, Mapping[str, Any]], a: str,
          b: str) -> str:
    behind = [f"{n} {(pairs.ms(group[n], a) or 0.0) / (pairs.ms(group[n], b) or 1.0):.3f}" for n in both
              if n not in met]
    return f"{what}: {len(met)}/{len(both)}" + (f" (behind, {a} / {b} time: {', '.join(behind)})" if behind else "")


def targets(cases: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The targets lines of the gemm and attention rows in a run (module docstring)."""
    out: list[str] = []
    for group, against in (("gemm", ("inductor_max", "eager")), ("attention", ("flex",))):
        mine = rows(cases, group)
        for a in ("coil", "coil_max"):
            for b in against:
                met, both = _beats(mine, a, b)
                if both:
                    out.append(_line(f"{a} >= {b} on {group} cases", met, both, mine, a, b))
    limits = bounded(cases)
    for group, what in (("gemm", "fused GEMM: coil <= limit x the bare matmul's eager time (epilogue free)"),
                        ("attention", "padded attention: coil <= limit x unmasked flash attention's eager time")):
        held = {n: v for n, v in limits.items() if cases[n].get("group") == group}
        if held:
            met = [n for n, (x, lim) in held.items() if x <= lim]
            out.append(f"{what}: {len(met)}/{len(held)} (" + ", ".join(f"{n} {x:.3f}" for n, (x, _) in held.items())
                       + ")")
    return out
