"""A kernel that reads some of its inputs through a table of addresses (`indirect`).

A CUDA graph bakes every kernel argument into the graph, addresses included. A tensor whose
address changes from call to call (a training backward's tangents: autograd's engine makes them
just before the backward) must then be copied into a buffer the graph owns, and that copy lives
beside the caller's tensor. A kernel made by `indirect` instead loads the address from an int64
table when it runs: the table's own address is what the graph bakes in, and the caller writes
the tensors' addresses into it before each replay (coil.wrapper_codegen's `PointerTable`, coil.runtime's CUDA-graph runner).

`indirect(ks, reads, table)`: `reads` maps a pointer argument of `ks` (a buffer name in
`ks.pointer_args`) to `(slot, dtype)`. The new kernel takes the buffer named `table` in that
argument's place (an int64 tensor) and starts with

    ptrK = tl.multiple_of(tl.load(ptrK + slot).to(tl.pointer_type(<dtype>)), 16)

so its body, unchanged, reads the tensor at the loaded address. The address must be 16-byte
aligned (what a pointer argument is specialised for; the wrapper copies a tensor that is not).
Only arguments the kernel does not store to may be read so (ValueError otherwise). The new
kernel's name is `name`, by default `<name>_via<slots>`; everything else (block sizes, warps, grid) is `ks`'s.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping

import torch
from coil.triton_codegen.kernel_source import KernelSource
from coil.triton_codegen.optable import tl_dtype

ALIGN = 16  # bytes: the alignment the loaded address is declared to have
_DEF = re.compile(r"^def (\w+)\(([^)]*)\):[ \t]*$", re.M)


def indirect(ks: KernelSource, reads: Mapping[str, tuple[int, torch.dtype]], table: str,
             name: str | None = None) -> KernelSource:
    """`ks` reading the buffers of `reads` through `table` (see the module docstring), named
    `name` if given."""
    if not reads:
        return ks
    stored = sorted(set(reads) & set(ks.stores))
    if stored:
        raise ValueError(f"indirect: kernel {ks.name} stores to {stored}; only inputs it reads can be indirect")
    missing = sorted(set(reads) - set(ks.pointer_args))
    if missing:
        raise ValueError(f"indirect: kernel {ks.name} takes no pointer argument {missing}")
    if table in ks.pointer_args:
        raise ValueError(f"indirect: kernel {ks.name} already takes {table!r}")
    m = _DEF.search(ks.source)
    if m is None or m.group(1) != ks.name:
        raise ValueError(f"indirect: no `def {ks.name}(...)` line in the kernel's source")
    params = [p.strip() for p in m.group(2).split(",")]
    slots = sorted(slot for slot, _ in reads.values())
    name = name or f"{ks.name}_via{'_'.join(str(s) for s in slots)}"
    loads = []
    for buf, (slot, dtype) in sorted(reads.items(), key=lambda kv: kv[1][0]):
        p = params[ks.pointer_args.index(buf)]
        loads.append(f"    {p} = tl.multiple_of(tl.load({p} + {slot}).to(tl.pointer_type({tl_dtype(dtype)})), {ALIGN})")
    head = f"def {name}({m.group(2)}):"
    source = ks.source[:m.start()] + head + "\n" + "\n".join(loads) + ks.source[m.end():]
    args = tuple(table if a in reads else a for a in ks.pointer_args)
    return dataclasses.replace(ks, name=name, source=source, pointer_args=args)
