"""Split a wrapper program into CUDA-graph segments around the steps a graph cannot capture.

`split_segments(program)` cuts `program.lines` (a `WrapperProgram` whose `blockers` name the
uncapturable ExternCalls, coil.scheduler.capture) into:

- *capturable segments*: maximal runs of steps (kernel launches and capturable extern calls, with
  the allocations, reuses and views before them and the frees after them), each of which the
  runtime may capture and replay as one CUDA graph;
- *eager segments*: the uncapturable extern calls (adjacent ones merged), run as they are.

Each segment is a boxed program of its own: `inputs` are the names it reads that an earlier
segment (or the graph's inputs) bound, `outputs` the names it binds that a later segment reads or
the graph returns. Constants are not inputs (the wrapper binds them once). A segment's `Free` of
a name it does not otherwise touch is dropped: the caller (coil.runtime's segment driver) drops
its own reference after the last segment that reads a name, so a buffer of segment 1 read by
segment 3 lives until segment 3 has it, and not longer.

The lines before the first step (`CheckInput`) go to the first segment; the views the `Return`
needs go to the last. `None` when there is nothing to split (no blocker) or the program has
symbolic sizes or binds size symbols (dynamic shapes: the whole graph is uncapturable anyway).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import sympy
from coil.wrapper_codegen.lines import (
    Allocate,
    Arena,
    CheckInput,
    ExternCall,
    Free,
    KernelCall,
    Line,
    Place,
    Ref,
    Return,
    Reuse,
    SizeOf,
    Track,
    Unpack,
    View,
    arena_view,
)
from coil.wrapper_codegen.plan import WrapperProgram


@dataclass(frozen=True)
class Segment:
    """One boxed part of a segmented program.

    `capture`: a CUDA graph may capture it (else `why` gives the blockers' reasons);
    `launches`: its kernel and extern calls (the runtime's worth-it rule weighs them).
    """

    lines: tuple[Line, ...]
    capture: bool
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    launches: int
    why: str | None = None


@dataclass(frozen=True)
class SegmentedProgram:
    """`graph_inputs`: the Unpack names (None: unused); `returns`: the Return values."""

    graph_inputs: tuple[str | None, ...]
    segments: tuple[Segment, ...]
    returns: tuple[Any, ...]


def refs(x: Any) -> list[str]:
    """Names of the Refs inside an argument tree."""
    if isinstance(x, Ref):
        return [x.name]
    if isinstance(x, list | tuple):
        return [n for v in x for n in refs(v)]
    if isinstance(x, dict):
        return [n for v in x.values() for n in refs(v)]
    return []


def uses_and_defs(line: Line) -> tuple[list[str], list[str], list[str]]:
    """(names read, names bound, names dropped) by one line."""
    if isinstance(line, Unpack):
        return [], [n for n in line.names if n is not None], []
    if isinstance(line, SizeOf):
        return [line.tensor], [line.name], []
    if isinstance(line, CheckInput):
        return [line.name], [], []
    if isinstance(line, Allocate):
        return [], [line.name], []
    if isinstance(line, Arena):
        return [], [line.name, *(arena_view(line.name, d) for d in line.dtypes)], []
    if isinstance(line, Place):
        return [arena_view(line.arena, line.dtype)], [line.name], []
    if isinstance(line, Reuse):
        return [line.donor], [line.name], [line.donor]
    if isinstance(line, Free):
        return [], [], [line.name]
    if isinstance(line, View):
        return [line.base], [line.name], []
    if isinstance(line, KernelCall):
        return list(line.args), [], []
    if isinstance(line, ExternCall):
        used = refs(line.args) + [n for _, v in line.kwargs for n in refs(v)]
        return used, refs(line.results), []
    if isinstance(line, Return):
        return refs(line.values), [], []
    if isinstance(line, Track):  # names as strings, not variables
        return [], [], []
    raise TypeError(f"unknown wrapper line {type(line).__name__}")


def _symbolic(x: Any) -> bool:
    """Whether a line (or an argument tree) holds a size expression over symbols."""
    if isinstance(x, sympy.Basic):
        return bool(x.free_symbols)
    if isinstance(x, list | tuple):
        return any(_symbolic(v) for v in x)
    if isinstance(x, dict):
        return any(_symbolic(v) for v in x.values())
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return any(_symbolic(getattr(x, f.name)) for f in dataclasses.fields(x))
    return False


def _groups(lines: list[Line], blockers: dict[int, str]) -> tuple[list[tuple[list[Line], str | None]], list[Line]]:
    """Per step: its lines (setup, the call, the frees after it) and its blocker; plus the tail."""
    groups: list[tuple[list[Line], str | None]] = []
    pending: list[Line] = []
    for i, line in enumerate(lines):
        if isinstance(line, KernelCall | ExternCall):
            groups.append(([*pending, line], blockers.get(i)))
            pending = []
        elif isinstance(line, Free) and not pending and groups:
            groups[-1][0].append(line)
        else:
            pending.append(line)
    return groups, pending


def split_segments(program: WrapperProgram) -> SegmentedProgram | None:
    """The program as segments (module docstring), or None when there is nothing to split."""
    lines = program.lines
    if not program.blockers or any(isinstance(ln, SizeOf) or _symbolic(ln) or (isinstance(ln, ExternCall) and ln.binds)
                                   for ln in lines):
        return None
    if not lines or not isinstance(lines[0], Unpack) or not isinstance(lines[-1], Return):
        raise ValueError("split_segments: a wrapper program starts with Unpack and ends with Return")
    graph_inputs = lines[0].names
    body = lines[1:-1]
    blockers = {i - 1: why for i, why in program.blockers.items()}
    head = 0
    while head < len(body) and isinstance(body[head], CheckInput | Free):
        head += 1
    checks = [ln for ln in body[:head] if isinstance(ln, CheckInput)]
    groups, tail = _groups(body[head:], {i - head: w for i, w in blockers.items()})
    runs: list[tuple[list[Line], bool, list[str]]] = []  # lines, capturable, reasons
    for group_lines, why in groups:
        capturable = why is None
        if runs and runs[-1][1] == capturable:
            runs[-1][0].extend(group_lines)
            if why is not None:
                runs[-1][2].append(why)
        else:
            runs.append((list(group_lines), capturable, [why] if why is not None else []))
    if not runs:
        return None
    runs[0] = (checks + runs[0][0], runs[0][1], runs[0][2])
    runs[-1][0].extend(tail)
    ret = lines[-1]
    assert isinstance(ret, Return)
    constants = set(program.constants)
    # inputs per segment (a name read before this segment binds it), walking forward
    walked: list[tuple[list[Line], list[str], set[str], set[str]]] = []
    for seg_lines, _, _ in runs:
        live: set[str] = set()
        bound_here: set[str] = set()
        inputs: list[str] = []
        kept: list[Line] = []
        for line in seg_lines:
            used, defs, drops = uses_and_defs(line)
            if isinstance(line, Free) and line.name not in live:
                continue  # the driver drops its own reference
            for n in used:
                if n not in live and n not in constants:
                    inputs.append(n)
                    live.add(n)
            for n in drops:
                live.discard(n)
                bound_here.discard(n)
            for n in defs:
                live.add(n)
                bound_here.add(n)
            kept.append(line)
        walked.append((kept, inputs, live & bound_here, bound_here))
    needed: set[str] = set(refs(ret.values))
    outputs_rev: list[list[str]] = []
    for _, inputs, alive, _ in reversed(walked):
        outputs_rev.append(sorted(alive & needed))
        needed = (needed - alive) | set(inputs)
    segments = []
    for (kept, inputs, _, _), (_, capturable, whys), outs in zip(walked, runs, reversed(outputs_rev), strict=True):
        launches = sum(isinstance(ln, KernelCall | ExternCall) for ln in kept)
        segments.append(Segment(tuple(kept), capturable, tuple(inputs), tuple(outs), launches,
                                None if capturable else "; ".join(whys)))
    return SegmentedProgram(graph_inputs, tuple(segments), ret.values)
