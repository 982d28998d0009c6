"""Interleaved timing rounds for `coil bench`'s micro cases.

Contract: `interleaved(calls, rounds, time_one)` times every call `rounds` times and returns each
name's times in round order; `time_modes(res, calls, rounds, context)` runs it for a micro
group's compiled modes with do_bench and fills in each mode's `ms` and the pairs. Within a round
every call is timed once, one after the other; the round's order is the names' order rotated by
the round number, so over the rounds each call runs first, in the middle and last alike. `paired(a, b)` compares two calls' rounds round by
round: the ratio a / b of each round, their median, and in how many rounds a took no longer.

Why: a micro case runs near the memory bandwidth, where Inductor's and coil's kernels differ by
fractions of a percent. Timed one after the other once each, the order, the GPU's clocks and
whatever ran just before move such a case by as much as that difference (the same kernels move
between runs: docs/perf.md). Alternating rounds put both under the same conditions; a round's
ratio compares two timings taken seconds apart.
"""

from __future__ import annotations

import contextlib
import statistics
import traceback
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["interleaved", "paired", "time_modes"]


def interleaved(calls: Mapping[str, Callable[[], object]], rounds: int,
                time_one: Callable[[Callable[[], object]], float]) -> dict[str, list[float]]:
    """`time_one(call)` of every call, `rounds` times, in rotating order (module docstring)."""
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    names = list(calls)
    out: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        k = r % len(names) if names else 0
        for n in names[k:] + names[:k]:
            out[n].append(time_one(calls[n]))
    return out


def paired(a: list[float], b: list[float]) -> dict[str, Any]:
    """Round-by-round comparison of two calls' times from one `interleaved` run: `ratios` (a / b
    per round), `median_ratio`, and `a_not_slower` (rounds where a <= b) of `rounds`."""
    if len(a) != len(b) or not a:
        raise ValueError(f"need the same, non-zero number of rounds, got {len(a)} and {len(b)}")
    ratios = [x / y for x, y in zip(a, b, strict=True)]
    return {"ratios": ratios, "median_ratio": statistics.median(ratios),
            "a_not_slower": sum(x <= y for x, y in zip(a, b, strict=True)), "rounds": len(a)}


def time_modes(res: dict[str, Any], calls: dict[str, Callable[[], object]], rounds: int,
               context: contextlib.AbstractContextManager[Any]) -> dict[str, list[float]]:
    """Time a micro case's modes in interleaved rounds of `measure.do_bench` inside `context`.

    Each call runs once first; one that raises gets its `error` in `res[mode]` and is dropped.
    Fills `res[mode]["ms_rounds"]` and `["ms"]` (the median) for every mode timed and
    `res["<a>_vs_<b>"]` (`paired`) for coil.bench.pairs' PAIRS and coil against Inductor's
    default; returns the rounds' times by mode.
    """
    import torch
    from coil.bench import measure
    from coil.bench.pairs import PAIRS

    with context:
        for mode, call in list(calls.items()):
            try:
                call()
                torch.cuda.synchronize()
            except Exception as exc:
                res[mode]["error"] = f"timing-phase call: {type(exc).__name__}: {exc}"[:800]
                traceback.print_exc()
                del calls[mode]
        times = interleaved(calls, rounds, lambda call: measure.do_bench(call, 25, 100))
    for mode, ms_rounds in times.items():
        res[mode]["ms_rounds"] = ms_rounds
        res[mode]["ms"] = statistics.median(ms_rounds)
    for a, b in (*PAIRS, ("coil", "inductor")):
        if a in times and b in times:
            res[f"{a}_vs_{b}"] = paired(times[a], times[b])
    return times
