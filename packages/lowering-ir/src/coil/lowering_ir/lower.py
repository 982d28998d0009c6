"""`lower(gm, name, split=...)`: a functional ATen FX graph -> LoweredGraph.

Walks the graph in order. Placeholders become InputBuffers (or SymbolInputs), get_attr tensors
ConstantBuffers; each call_function goes through the lowering table (coil.lowering_ir.registry)
and, when there is no lowering or it raises Unsupported, becomes an ATen fallback ExternKernel.
Every buffer's layout is taken from the node's `meta["val"]` (a FakeTensor), so coil's outputs
have exactly the strides eager PyTorch gives. Then cheap Pointwise results read at another
index are substituted into their readers (coil.lowering_ir.inline; COIL_INLINE=0: off), and
kernels whose results nobody reads (e.g. the allocation behind an `empty_like` used only for
its shape) are dropped. A graph that mixes devices runs its kernels on its CUDA device and
nodes of other devices through ATen, and no kernel reads another device's buffer (a CPU scalar
read by a CUDA kernel becomes a literal or a copy: coil.lowering_ir.devices). Reductions are
split under the machine facts the caller passes (`split`, a `SplitRule`: the device's SM
count, codegen's outputs per outer-reduction program).
"""

from __future__ import annotations

import torch.fx
from coil.knobs import knobs
from coil.lowering_ir import ops as _ops  # noqa: F401  (registers the lowerings)
from coil.lowering_ir.devices import foldable, place_reads
from coil.lowering_ir.inline import inline_pointwise
from coil.lowering_ir.lowerer import Lowerer
from coil.lowering_ir.nodes import Buffer, ExternKernel, LoweredGraph, Operation, ReinterpretView
from coil.lowering_ir.split_rule import SplitRule


def lower(gm: torch.fx.GraphModule, name: str = "graph", *, split: SplitRule | None = None) -> LoweredGraph:
    """Lower a functional ATen graph whose nodes carry meta["val"]. Raises LoweringError.

    `split`: the machine facts of the split-reduction rule (the device's SM count, codegen's
    outputs per outer-reduction program); None takes `SplitRule()`, the default for callers
    without a device (coil.lowering_ir.split_rule).
    """
    lowerer = Lowerer(gm, name, split)
    graph = lowerer.run()
    graph.operations = place_reads(graph, lowerer.fresh)
    if knobs.inline:
        graph.operations = inline_pointwise(graph.operations, graph.outputs)
    graph.operations = drop_unread(graph.operations, graph.outputs)
    graph.verify()
    return graph


def drop_unread(operations: list[Operation], outputs: list[object]) -> list[Operation]:
    """`operations` without the kernels (Pointwise, Reduction, Scatter) none of whose outputs
    is read by a later operation or returned. ExternKernels stay (an ATen call may mutate an
    input or draw from the global random generator) unless pure and computing one CPU element
    (`devices.foldable`: kernels of other devices read its value as a literal)."""
    live: set[str] = set()

    def mark(x: object) -> None:
        if isinstance(x, Buffer | ReinterpretView):
            live.add(x.storage.name)
        elif isinstance(x, list | tuple):
            for y in x:
                mark(y)

    mark(outputs)
    kept: list[Operation] = []
    for op in reversed(operations):
        if (isinstance(op, ExternKernel) and not foldable(op)) or any(b.name in live for b in op.outputs):
            kept.append(op)
            live.update(op.reads())
    return list(reversed(kept))
