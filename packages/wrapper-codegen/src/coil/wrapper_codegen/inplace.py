"""Scatters that write in place into a base that dies at them.

A Scatter's output starts as a copy of its base (its init kernel), then the scatter kernel
writes (or atomically adds) the source points into it. When the base has storage of its own
(a kernel's store, or a fresh ATen result), the Scatter is its last reader, and the output
has the base's exact layout, the output can take over the base's storage: no init kernel, and
one buffer fewer live (a tied embedding's gradient accumulates into the output projection's
gradient this way, one vocabulary-sized buffer less at the end of the backward).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from coil.lowering_ir import Buffer, ExternKernel, InputBuffer, Scatter, loads
from coil.scheduler import KernelGroup
from coil.scheduler.schedule import Step

__all__ = ["inplace_scatters", "kernel_stores"]


def _reads_other_than_target(op: Scatter) -> set[str]:
    """Buffers the scatter kernel reads: its values, indirect indices and mask (not the base)."""
    values = [op.value, *[v for _, v in op.target.indirect]]
    if op.target.mask is not None:
        values.append(op.target.mask)
    return {ld.buffer for v in values for ld in loads(v)}


def _fresh_results(st: ExternKernel) -> bool:
    """The ATen op returns new tensors (no result aliases an input) and writes no input."""
    op = st.kernel
    if st.mutates or not isinstance(op, torch._ops.OpOverload):
        return False
    return all(r.alias_info is None for r in op._schema.returns)


def kernel_stores(steps: Sequence[Step]) -> set[str]:
    """Buffers the wrapper allocates: kernel groups' stores and Scatter outputs."""
    stores = {w for st in steps if isinstance(st, KernelGroup) for w in st.stores}
    return stores | {st.output.name for st in steps if isinstance(st, Scatter)}


def _fresh_extern_results(steps: Sequence[Step]) -> set[str]:
    """Results of the ATen calls that return fresh tensors: storage theirs alone when made."""
    return {b.name for st in steps if isinstance(st, ExternKernel) and _fresh_results(st) for b in st.outputs}


def inplace_scatters(steps: Sequence[Step], buffers: Mapping[str, Buffer], last: Mapping[str, int],
                     kept: set[str]) -> dict[str, str]:
    """{scatter output: its base} for the Scatters that can write into their base's storage.

    A Scatter at step i qualifies when its base is a buffer (not a view) with storage of its
    own (one of the `kernel_stores`, which the wrapper allocates, or the result of an ATen call
    returning fresh tensors), that no one reads after step i (`last[base] == i`) and that is not
    in `kept` (graph outputs, inputs, constants: storage the caller sees); the output and the
    base have one size, stride, offset, dtype and device; and the scatter kernel reads neither
    (its values, indices and mask come from other buffers), so no point reads an element
    another point has already written.
    """
    allocated = kernel_stores(steps) | _fresh_extern_results(steps)
    found: dict[str, str] = {}
    for i, st in enumerate(steps):
        if not isinstance(st, Scatter) or not isinstance(st.base, Buffer) or isinstance(st.base, InputBuffer):
            continue
        base, out = st.base.name, st.output.name
        if base not in allocated or base in kept or last.get(base) != i or base not in buffers:
            continue
        a, b = buffers[base].layout, st.output.layout
        if (a.size, a.stride, a.offset, a.dtype, a.device) != (b.size, b.stride, b.offset, b.dtype, b.device):
            continue
        if {base, out} & _reads_other_than_target(st):
            continue
        found[out] = base
    return found
