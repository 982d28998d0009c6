"""A backward graph's tangents read through a pointer table instead of copied (the glue between
wrapper-codegen's `plan_indirect` and triton-codegen's table reads, `generate_like(...,
indirect=..., table=...)`).

Autograd's engine makes a backward's tangents just before each call (for outputs the loss does
not use, tensors of zeros), so their addresses change from step to step. A CUDA graph that read
them through its own buffers would hold a copy of each beside the engine's, tens to hundreds of
MiB on a model's training step (docs/perf.md).
`plan(gm, sched, sources, lines, target, options)` picks the tangents of at least `MIN_BYTES`
that only Triton kernels read (no extern, view or return), gives each a slot of the wrapper's
pointer table and returns the rewritten wrapper lines with the kernel sources, those kernels
replaced by their groups generated again (as the kept kernels were: strategy, launch
configuration) to load the tangents' addresses from the table. The wrapper writes the addresses
before each call; coil.runtime's CUDA-graph runner before each replay.

`applies(kind, device, lowered)`: COIL_INDIRECT_INPUTS=auto plans backward graphs that will be
replayed as CUDA graphs (CUDA, cuda_graphs and cuda_graphs_training on, static shapes); always,
every backward graph with static shapes (the CPU too, through Triton's interpreter: tests); 0,
none. Never with COIL_CHECK_LIFETIMES (its instrumentation follows the original lines).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.fx
from coil.knobs import knobs
from coil.lowering_ir import InputBuffer, LoweredGraph
from coil.scheduler import ComboGroup, Schedule
from coil.triton_codegen import CodegenOptions, KernelSource, generate_like
from coil.wrapper_codegen import IndirectPlan, InputLayout, KernelCall, Line, plan_indirect

MIN_BYTES = 1 << 20  # smaller tangents: their copies cost little, the table write the same
TABLE = "pointer_table"


def applies(kind: str, device: torch.device, lowered: LoweredGraph) -> bool:
    """Whether a graph of this kind on this device gets a pointer table (module docstring)."""
    mode = str(knobs.indirect_inputs).lower()
    if mode not in ("auto", "always", "0", "off"):
        raise ValueError(f"COIL_INDIRECT_INPUTS={knobs.indirect_inputs!r}: expected auto, always or 0")
    if kind != "backward" or mode in ("0", "off") or lowered.symbol_hints or knobs.check_lifetimes:
        return False
    return mode == "always" or (device.type == "cuda" and knobs.cuda_graphs and knobs.cuda_graphs_training)


def plan(gm: torch.fx.GraphModule, sched: Schedule, sources: Sequence[KernelSource], lines: list[Line],
         target: str, options: CodegenOptions) -> tuple[IndirectPlan, list[KernelSource]] | None:
    """The wrapper lines and kernel sources with the tangents read through the table, or None
    when no tangent qualifies (module docstring). `sources` were generated from
    `sched.kernel_groups()` for `target` with `options` (then possibly autotuned)."""
    lowered = sched.graph
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    tangents = {i for i, n in enumerate(placeholders) if n.name.startswith("tangents")}
    # a combo kernel's parts are not generated with a table (triton-codegen's combo.py)
    combo_reads = {r for g in sched.kernel_groups() if isinstance(g, ComboGroup) for op in g.ops for r in op.reads()}
    candidates: dict[str, InputLayout] = {}
    for b in lowered.inputs:
        if not isinstance(b, InputBuffer) or b.index not in tangents or b.name in combo_reads:
            continue
        lay = b.layout
        size, stride = tuple(int(s) for s in lay.size), tuple(int(s) for s in lay.stride)
        if lay.dtype.itemsize * math.prod(size) >= MIN_BYTES and int(lay.offset) == 0:
            candidates[b.name] = InputLayout(size, stride, lay.dtype)
    if not candidates:
        return None
    got = plan_indirect(lines, candidates, {ks.name: ks.stores for ks in sources}, TABLE)
    if got is None:
        return None
    by_name = {ks.name: ks for ks in sources}
    dtypes = {name: lay.dtype for name, lay in candidates.items()}
    groups = {g.name: g for g in sched.kernel_groups()}
    bufs = lowered.buffers()
    made = [generate_like(by_name[src], groups[src], bufs, target, lowered.symbol_hints, options,
                          indirect={b: (slot, dtypes[b]) for b, slot in reads.items()}, table=TABLE, name=name)
            for name, (src, reads) in got.kernels.items()]
    called = {ln.kernel for ln in got.lines if isinstance(ln, KernelCall)}
    return got, [ks for ks in sources if ks.name in called] + made
