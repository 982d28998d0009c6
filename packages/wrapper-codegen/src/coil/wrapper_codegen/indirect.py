"""Graph inputs that kernels read through a table of addresses (`plan_indirect`).

A CUDA graph reads its inputs at the addresses it was captured with, so a runner copies an input
whose address changes (a training backward's tangents, made by autograd just before the call)
into a buffer of its own before each replay: the graph holds a second copy of every such input
while the caller still holds the first (zero gradients of a key/value cache, the logits'
gradient: up to hundreds of MiB; docs/perf.md). An input that only
Triton kernels read needs no copy: the kernels can load its address from an int64 table when
they run (coil.triton_codegen's `indirect`), and the caller writes the addresses into the table
before each call or replay (the wrapper's `PointerTable`, coil.runtime's CUDA-graph runner).

`plan_indirect(lines, candidates, stores, table)` picks the candidates (graph input names with
their layouts) whose every use in `lines` is an argument of a `KernelCall` whose kernel does not
store to it (`stores`: kernel name -> buffers it stores), or its `Free` or `CheckInput`: no
extern, view, reuse, size read or return. Each gets a slot of the table. Every `KernelCall`
reading one is rewritten to call a new kernel, `<kernel>_via<slots>`, with `table` in that
argument's place; the plan lists, per new kernel, the kernel it is made from and which of its
buffers it reads from which slot, for the caller to generate (coil.triton_codegen.indirect).
None when no candidate qualifies.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from coil.wrapper_codegen.lines import CheckInput, Free, KernelCall, Line, Unpack
from coil.wrapper_codegen.segments import uses_and_defs


@dataclass(frozen=True)
class InputLayout:
    """A graph input's size, stride and dtype (what the kernels reading it assume)."""

    size: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype


@dataclass(frozen=True)
class IndirectPlan:
    """`lines`: the program with the kernel calls rewritten; `table`: the table's variable name;
    `slots`: graph input index -> (slot, its layout); `kernels`: new kernel name -> (the kernel it
    is made from, {buffer name: slot})."""

    lines: list[Line]
    table: str
    slots: dict[int, tuple[int, InputLayout]]
    kernels: dict[str, tuple[str, dict[str, int]]]


def plan_indirect(lines: list[Line], candidates: Mapping[str, InputLayout],
                  stores: Mapping[str, tuple[str, ...]], table: str) -> IndirectPlan | None:
    """The candidates kernels alone read, read through `table` (module docstring)."""
    if not lines or not isinstance(lines[0], Unpack):
        raise ValueError("plan_indirect: a wrapper program starts with an Unpack line")
    index = {n: i for i, n in enumerate(lines[0].names) if n is not None}
    unknown = sorted(set(candidates) - set(index))
    if unknown:
        raise ValueError(f"plan_indirect: {unknown} are not graph inputs of this program")
    ok = set(candidates)
    for line in lines:
        read, bound, _ = uses_and_defs(line)
        if table in read or table in bound:
            raise ValueError(f"plan_indirect: the program already uses the name {table!r}")
        used = set(read) & ok
        if not used or isinstance(line, Free | CheckInput):
            continue
        if isinstance(line, KernelCall):
            ok -= used & set(stores.get(line.kernel, ()))
        else:
            ok -= used
    if not ok:
        return None
    slot_of = {name: k for k, name in enumerate(sorted(ok, key=index.__getitem__))}
    out: list[Line] = []
    kernels: dict[str, tuple[str, dict[str, int]]] = {}
    for line in lines:
        if isinstance(line, KernelCall) and set(line.args) & ok:
            reads = {a: slot_of[a] for a in line.args if a in ok}
            name = f"{line.kernel}_via{'_'.join(str(s) for s in sorted(set(reads.values())))}"
            if kernels.setdefault(name, (line.kernel, reads)) != (line.kernel, reads):
                raise ValueError(f"plan_indirect: two calls of {line.kernel} read slots {sorted(reads.values())} "
                                 "from different buffers")
            line = KernelCall(name, line.grid, tuple(table if a in ok else a for a in line.args), line.sizes)
        out.append(line)
    slots = {index[n]: (k, candidates[n]) for n, k in slot_of.items()}
    return IndirectPlan(out, table, slots, kernels)


def layout_literal(plan: IndirectPlan) -> dict[int, tuple[int, tuple[int, ...], tuple[int, ...], Any]]:
    """The plan's slots as the wrapper's `PointerTable` takes them: input index -> (slot, size,
    stride, dtype)."""
    return {i: (k, lay.size, lay.stride, lay.dtype) for i, (k, lay) in sorted(plan.slots.items())}
