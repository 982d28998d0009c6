"""Kernels that read some of their inputs through a table of addresses (`generate(...,
indirect=..., table=...)`).

A CUDA graph bakes every kernel argument into the graph, addresses included. A tensor whose
address changes from call to call (a training backward's tangents: autograd's engine makes them
just before the backward) must then be copied into a buffer the graph owns, and that copy lives
beside the caller's tensor. A kernel generated with `indirect` instead loads the address from an
int64 table when it runs: the table's own address is what the graph bakes in, and the caller
writes the tensors' addresses into it before each replay (coil.wrapper_codegen's `PointerTable`,
coil.runtime's CUDA-graph runner).

`indirect` maps a buffer the kernel reads (one of its pointer arguments) to `(slot, dtype)`. The
kernel takes the buffer named `table` (an int64 tensor) in that argument's place and starts with

    ptrK = tl.multiple_of(tl.load(ptrK + slot).to(tl.pointer_type(<dtype>)), 16)

so the rest of its body reads the tensor at the loaded address. The address must be 16-byte
aligned (what a pointer argument is specialised for; the wrapper copies a tensor that is not).
Only buffers the kernel does not store to may be read so (ValueError otherwise). The kernel's
name is `name`, by default `<group name>_via<slots>`; everything else (block sizes, warps, grid)
is as without the table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from coil.triton_codegen.optable import tl_dtype

ALIGN = 16  # bytes: the alignment the loaded address is declared to have


@dataclass(frozen=True)
class IndirectReads:
    """Which pointer arguments a kernel loads from `table` (module docstring): buffer ->
    (slot, dtype), and the kernel's name (None: `<group name>_via<slots>`)."""

    reads: Mapping[str, tuple[int, torch.dtype]]
    table: str
    name: str | None = None

    def kernel_name(self, group_name: str) -> str:
        """The kernel's name: `name`, or the group's with the slots it reads."""
        slots = sorted(slot for slot, _ in self.reads.values())
        return self.name or f"{group_name}_via{'_'.join(str(s) for s in slots)}"

    def check(self, kernel: str, pointer_args: Sequence[str], stores: Sequence[str]) -> None:
        """ValueError unless every buffer of `reads` is a pointer argument the kernel does not
        store to, and the table's name is none of them."""
        stored = sorted(set(self.reads) & set(stores))
        if stored:
            raise ValueError(f"indirect: kernel {kernel} stores to {stored}; only inputs it reads can be indirect")
        missing = sorted(set(self.reads) - set(pointer_args))
        if missing:
            raise ValueError(f"indirect: kernel {kernel} takes no pointer argument {missing}")
        if self.table in pointer_args:
            raise ValueError(f"indirect: kernel {kernel} already takes {self.table!r}")

    def pointer_args(self, pointer_args: Sequence[str]) -> tuple[str, ...]:
        """The kernel's pointer arguments with the table in place of each buffer it reads."""
        return tuple(self.table if a in self.reads else a for a in pointer_args)

    def table_loads(self, params: Mapping[str, str]) -> list[str]:
        """The body's first lines: each parameter (`params`: buffer -> its parameter's name) set
        to the address loaded from its slot, in slot order."""
        out = []
        for buf, (slot, dtype) in sorted(self.reads.items(), key=lambda kv: kv[1][0]):
            p = params[buf]
            out.append(f"    {p} = tl.multiple_of(tl.load({p} + {slot}).to(tl.pointer_type({tl_dtype(dtype)})), {ALIGN})")
        return out
