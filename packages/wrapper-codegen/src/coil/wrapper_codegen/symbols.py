"""Every size symbol a wrapper program uses is bound by an earlier line.

The wrapper binds size symbols as it runs: the graph inputs that are sizes (Unpack), the sizes of
input tensors (SizeOf), and the data-dependent sizes an ATen call determines (its scalar result,
its BindSymbol lines). `check_bound` makes a use before any binding a compile error instead of a
NameError when the graph runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sympy
from coil.wrapper_codegen.lines import (
    Allocate,
    Arena,
    CheckInput,
    ExternCall,
    KernelCall,
    Line,
    Place,
    Ref,
    Return,
    Reuse,
    SizeOf,
    Unpack,
    View,
    arena_view,
)

__all__ = ["DynamicShapeError", "check_bound"]


class DynamicShapeError(NotImplementedError):
    """A size the wrapper cannot compute at run time (a symbol no line binds before its use)."""


def _line_symbols(line: Line) -> set[str]:
    """Names of the size symbols `line` uses."""
    fields: list[Any] = []
    if isinstance(line, CheckInput | Allocate | Reuse | Place):
        fields = [line.size, line.stride]
    elif isinstance(line, View):
        fields = [line.size, line.stride, line.offset]
    elif isinstance(line, KernelCall):
        fields = [line.grid, line.sizes]
    elif isinstance(line, ExternCall):  # its `expect` may use what it binds: `check_bound` checks it after
        fields = [line.args, [v for _, v in line.kwargs]]
    elif isinstance(line, Return):
        fields = [line.values]
    out: set[str] = set()

    def walk(x: Any) -> None:
        if isinstance(x, sympy.Basic):
            out.update(str(s) for s in x.free_symbols)
        elif isinstance(x, list | tuple):
            for y in x:
                walk(y)

    walk(fields)
    return out


def _bound_names(line: Line) -> set[str]:
    """The wrapper variables `line` binds."""
    if isinstance(line, Unpack):
        return {n for n in line.names if n is not None}
    if isinstance(line, SizeOf | Allocate | Reuse | View | Place):
        return {line.name}
    if isinstance(line, Arena):
        return {line.name, *(arena_view(line.name, d) for d in line.dtypes)}
    if isinstance(line, ExternCall):
        names: set[str] = set()

        def walk(x: Any) -> None:
            if isinstance(x, Ref):
                names.add(x.name)
            elif isinstance(x, list | tuple):
                for y in x:
                    walk(y)

        walk(line.results)
        return names | {b.name for b in line.binds} | {name for name, _, _ in line.expect}
    return set()


def check_bound(lines: Sequence[Line]) -> None:
    """Raise DynamicShapeError when a line uses a size symbol that no earlier line binds (an
    input's SizeOf or Unpack, an extern's scalar result or BindSymbol): the wrapper would fail
    with a NameError at run time."""
    bound: set[str] = set()

    def check(line: Line, used: set[str]) -> None:
        if used - bound:
            raise DynamicShapeError(f"size symbols {sorted(used - bound)} are used by {type(line).__name__} "
                                    f"{getattr(line, 'name', getattr(line, 'op', ''))} before any line binds them")

    for line in lines:
        check(line, _line_symbols(line))
        bound |= _bound_names(line)
        if isinstance(line, ExternCall):
            check(line, {str(s) for _, size, stride in line.expect for e in (*size, *stride)
                         if isinstance(e, sympy.Basic) for s in e.free_symbols})
