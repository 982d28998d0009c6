"""Mode against mode over a whole `coil bench` run: geomeans of time ratios, and the rows behind.

`PAIRS` are the comparisons the protocol asks for: coil (CUDA graphs) against Inductor's
reduce-overhead mode (CUDA graphs too: its fair peer), coil without CUDA graphs against
Inductor's default (its fair peer), coil against eager, coil and coil's max-autotune mode
(`coil_max`: its GEMM templates where timed faster) against Inductor's max-autotune
(`inductor_max`: its matmul templates, where a run has it: the gemm rows) and coil against
FlexAttention compiled by Inductor (`flex`: the attention rows). For a pair (a, b), a row's ratio is
a's median time over b's (below 1: a is faster); a pair's figure is the geometric mean of the
ratios over every row where both modes have a time, never one configuration. `compare` gives
that with the rows where a is slower; `lines` the report's sentences, for all rows and, where
the run has several, per group of rows (micro, gemm, attention, models, zoo).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

PAIRS: tuple[tuple[str, str], ...] = (("coil", "inductor_ro"), ("coil_nocg", "inductor"), ("coil", "eager"),
                                      ("coil", "inductor_max"), ("coil_max", "inductor_max"), ("coil", "flex"))


def ms(res: Mapping[str, Any], mode: str) -> float | None:
    """A row's median time in `mode`, None when the mode did not run or failed."""
    r = res.get(mode)
    v = r.get("ms") if isinstance(r, Mapping) else None
    return float(v) if isinstance(v, int | float) and v > 0 else None


def geomean(xs: Iterable[float]) -> float:
    """The geometric mean of positive numbers; ValueError for none."""
    vals = list(xs)
    if not vals:
        raise ValueError("geomean of no values")
    return math.exp(sum(map(math.log, vals)) / len(vals))


@dataclass
class Comparison:
    """Mode `a` against mode `b` over some rows: `ratios` (a's time / b's, by row, for the rows
    where both ran), `missing` (rows where one of them has no time)."""

    a: str
    b: str
    ratios: dict[str, float] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)

    @property
    def geomean(self) -> float | None:
        return geomean(self.ratios.values()) if self.ratios else None

    @property
    def slower(self) -> dict[str, float]:
        """The rows where `a` took longer than `b`, slowest first."""
        return dict(sorted(((n, x) for n, x in self.ratios.items() if x > 1), key=lambda t: -t[1]))


def compare(cases: Mapping[str, Mapping[str, Any]], a: str, b: str) -> Comparison:
    """`a` against `b` over `cases` (a report's rows; skipped rows left out)."""
    out = Comparison(a, b)
    for name, res in cases.items():
        if "skipped" in res:
            continue
        x, y = ms(res, a), ms(res, b)
        if x is not None and y is not None:
            out.ratios[name] = x / y
        else:
            out.missing.append(name)
    return out


def group_of(res: Mapping[str, Any]) -> str:
    """The group a row belongs to: micro, gemm, attention, models (the five hand-picked) or zoo."""
    return "micro" if res.get("kind") == "micro" else str(res.get("group") or "models")


def sentence(c: Comparison, where: str = "") -> str:
    """One pair's report line: its geomean, how many rows it is over, the rows it lacks and
    those where `a` is slower."""
    g = c.geomean
    head = f"{c.a} / {c.b} time{where}: "
    if g is None:
        return head + f"no row where both ran ({len(c.missing)} without both)"
    pace = f"{c.a} {1 / g:.2f}x as fast" if g <= 1 else f"{c.a} {g:.2f}x as slow"
    text = head + f"geomean {g:.3f} over {len(c.ratios)} rows ({pace})"
    if c.missing:
        text += f"; {len(c.missing)} rows without both"
    slower = c.slower
    text += ("; slower in " + ", ".join(f"{n} {x:.2f}" for n, x in slower.items())) if slower else "; never slower"
    return text


def lines(cases: Mapping[str, Mapping[str, Any]], modes: Iterable[str]) -> list[str]:
    """The report's sentences for every pair of PAIRS whose modes both ran: over all rows, then
    per group (those with a row where both ran) when the rows come from several."""
    ran = set(modes)
    groups: dict[str, dict[str, Mapping[str, Any]]] = {}
    for name, res in cases.items():
        groups.setdefault(group_of(res), {})[name] = res
    out: list[str] = []
    for a, b in PAIRS:
        if a not in ran or b not in ran:
            continue
        out.append(sentence(compare(cases, a, b)))
        if len(groups) > 1:
            per = {g: compare(rows, a, b) for g, rows in groups.items()}
            out += [sentence(c, f" ({g} rows)") for g, c in per.items() if c.ratios]
    return out
