"""`lower(gm)`: a functional ATen FX graph -> LoweredGraph.

Walks the graph in order. Placeholders become InputBuffers (or SymbolInputs), get_attr tensors
ConstantBuffers; each call_function goes through the lowering table (coil.lowering_ir.registry)
and, when there is no lowering or it raises Unsupported, becomes an ATen fallback ExternKernel.
Every buffer's layout is taken from the node's `meta["val"]` (a FakeTensor), so coil's outputs
have exactly the strides eager PyTorch gives.
"""

from __future__ import annotations

import torch.fx
from coil.lowering_ir import ops as _ops  # noqa: F401  (registers the lowerings)
from coil.lowering_ir.lowerer import Lowerer
from coil.lowering_ir.nodes import LoweredGraph


def lower(gm: torch.fx.GraphModule, name: str = "graph") -> LoweredGraph:
    """Lower a functional ATen graph whose nodes carry meta["val"]. Raises LoweringError."""
    graph = Lowerer(gm, name).run()
    graph.verify()
    return graph

