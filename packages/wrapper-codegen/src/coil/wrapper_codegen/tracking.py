"""Lifetime tracking as a pass over the Wrapper IR: Track lines around the lines that make,
hand on, free or use buffers, for a run-time tracker to check against the memory plan.

`track_lifetimes(lines)` returns the program with, per line:

| line       | Track lines                                                            |
|------------|------------------------------------------------------------------------|
| Unpack     | after: `begin()`                                                       |
| Allocate   | after: `alloc(name)`                                                   |
| Reuse      | after: `reuse(name, donor)`                                            |
| Place      | after: `place(name, arena)` (the emitters pass the two tensors too)    |
| Free       | before: `free(name)`                                                   |
| ExternCall | after: `alloc(result)` per named result (sorted), then `stepped()`     |
| KernelCall | after: `stepped()`                                                     |
| Return     | before: `returning()`                                                  |

Step `i` is then the i-th kernel or extern call, as the tracker counts them. The tracker is
whatever the wrapper's `TRACKER` global names (emit_python) or `emit_fx(tracker=...)` gets; the
checks themselves are the caller's (coil.backend's COIL_CHECK_LIFETIMES).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from coil.wrapper_codegen.lines import (
    Allocate,
    ExternCall,
    Free,
    KernelCall,
    Line,
    Place,
    Ref,
    Return,
    Reuse,
    Track,
    Unpack,
)

__all__ = ["track_lifetimes"]


def _result_names(x: Any) -> set[str]:
    """The names an extern's result tree binds."""
    if isinstance(x, Ref):
        return {x.name}
    if isinstance(x, list | tuple):
        return set().union(*(_result_names(y) for y in x))
    return set()


def _around(line: Line) -> tuple[list[Line], list[Line]]:
    """The Track lines before and after `line` (module docstring's table)."""
    if isinstance(line, Unpack):
        return [], [Track("begin")]
    if isinstance(line, Allocate):
        return [], [Track("alloc", (line.name,))]
    if isinstance(line, Reuse):
        return [], [Track("reuse", (line.name, line.donor))]
    if isinstance(line, Place):
        return [], [Track("place", (line.name, line.arena))]
    if isinstance(line, Free):
        return [Track("free", (line.name,))], []
    if isinstance(line, ExternCall):
        return [], [*(Track("alloc", (n,)) for n in sorted(_result_names(line.results))), Track("stepped")]
    if isinstance(line, KernelCall):
        return [], [Track("stepped")]
    if isinstance(line, Return):
        return [Track("returning")], []
    return [], []


def track_lifetimes(lines: Sequence[Line]) -> list[Line]:
    """`lines` with Track lines inserted around them (module docstring). Lines that are Track
    already are kept as they are and get none."""
    out: list[Line] = []
    for line in lines:
        before, after = _around(line)
        out += [*before, line, *after]
    return out
