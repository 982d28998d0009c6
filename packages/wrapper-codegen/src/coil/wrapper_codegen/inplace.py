"""Outputs that write in place into a buffer that dies at the step writing them.

A Scatter's output starts as a copy of its base (its init kernel), then the scatter kernel
writes (or atomically adds) the source points into it. When the base has storage of its own
(a kernel's store, or a fresh ATen result), the Scatter is its last reader, and the output
has the base's exact layout, the output can take over the base's storage: no init kernel, and
one buffer fewer live (a tied embedding's gradient accumulates into the output projection's
gradient this way, one vocabulary-sized buffer less at the end of the backward).

A pointwise kernel's store can take over the storage of a buffer it reads the same way
(`inplace_pointwise`): a convolution's result that its normalisation, residual add and
activation kernel reads for the last time, one activation fewer live per block. Each element
is then read before it is overwritten, by the same program, and never read again: the kernel
reads that buffer only at the index where it stores, first no later than the store (one load,
which the kernel's later loads share).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import sympy
import torch
from coil.lowering_ir import Buffer, Expr, ExternKernel, InputBuffer, Scatter, loads
from coil.scheduler import ComboGroup, KernelGroup
from coil.scheduler.schedule import Step

__all__ = ["inplace_pointwise", "inplace_scatters", "kernel_stores", "storage_root"]


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


def _plain_reads(st: KernelGroup) -> tuple[dict[str, set[Expr] | None], dict[str, int]]:
    """Per buffer the group reads from memory, the kernel indices of its loads (None for a
    buffer some load reads under a mask or at an index computed from loaded values), and the
    position of the first member that loads it."""
    own = set(st.stores) | set(st.internal)
    out: dict[str, set[Expr] | None] = {}
    first: dict[str, int] = {}
    for k, m in enumerate(st.members):
        for ld in m.nest.body_loads:
            if ld.buffer in own:
                continue  # the kernel's own value, in registers
            first.setdefault(ld.buffer, k)
            seen = out.setdefault(ld.buffer, set())
            if seen is None or ld.mask is not None or ld.indirect:
                out[ld.buffer] = None
            else:
                seen.add(m.kernel_expr(ld.index))
    return out, first


def storage_root(name: str, aliased: Mapping[str, str | None]) -> str | None:
    """The buffer whose storage `name` is: `name` itself, or for an ATen result that views an
    argument (`aliased`, followed through views of views) that argument's (None where it is no
    buffer of the graph)."""
    base: str | None = name
    while base is not None and base in aliased:
        base = aliased[base]
    return base


def inplace_pointwise(steps: Sequence[Step], buffers: Mapping[str, Buffer], last: Mapping[str, int],
                      kept: set[str], aliased: Mapping[str, str | None]) -> dict[str, str]:
    """{kernel store: the buffer whose storage it takes} for pointwise kernels that can store
    into a buffer they read for the last time (module docstring).

    A store B of the group at step i (not a combo's, no reduction) takes buffer A when: A has
    storage of its own (`kernel_stores`, or the result of an ATen call returning fresh tensors
    that is not in `aliased`: `wait_tensor` returns its argument though its schema says not),
    is neither in `kept` (graph outputs, inputs, constants) nor read after step i
    (`last[A] == i`); A and B have one storage offset, extent, dtype and device (their sizes
    and strides may differ: the kernel's indices are element offsets into the storage); every
    load of A in the kernel is unmasked, direct and at B's store index, and the first is made by
    B's member or one before it (the kernel computes and stores its members in order, and a
    later load of A at that index reuses the first: none reads A after B's store); and the
    kernel reads no result that aliases A (`aliased`: ATen results that view an argument, each
    with that argument's storage). Each A goes to one store."""
    allocated = kernel_stores(steps) | _fresh_extern_results(steps)
    found: dict[str, str] = {}
    for i, st in enumerate(steps):
        if not isinstance(st, KernelGroup) or isinstance(st, ComboGroup) or st.is_reduction or st.r_dims:
            continue
        reads, first_read = _plain_reads(st)
        views_of = {storage_root(r, aliased) for r in reads if r in aliased}
        taken: set[str] = set()
        for k, m in enumerate(st.members):
            out = m.op.output.name
            if out not in st.stores or out not in buffers or isinstance(m.op, Scatter):
                continue
            index = m.kernel_expr(m.nest.store_index)
            b = buffers[out].layout
            for base, indices in reads.items():
                if indices != {index} or first_read[base] > k or base in taken or base in views_of or base in kept:
                    continue
                if base not in allocated or base in aliased or last.get(base) != i or base not in buffers:
                    continue
                a = buffers[base].layout  # the indices are offsets: one dtype and extent suffice
                if ((a.offset, a.dtype, a.device) != (b.offset, b.dtype, b.device)
                        or sympy.sympify(a.storage_extent() - b.storage_extent()) != 0):
                    continue
                found[out] = base
                taken.add(base)
                break
    return found
