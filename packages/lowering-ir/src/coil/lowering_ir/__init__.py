"""coil.lowering_ir: lowers functional ATen FX graphs to coil's loop-level IR.

Public API (see README.md): `lower`, the IR node types, the value language, layouts, the
lowering registry, coil's decomposition table and `SplitRule` (the split-reduction rule's
machine facts, an input of `lower`).
"""

from coil.lowering_ir.decompositions import decomposition_table
from coil.lowering_ir.errors import LoweringError, Unsupported
from coil.lowering_ir.layout import Expr, Layout, as_expr, contiguous_strides
from coil.lowering_ir.lower import lower
from coil.lowering_ir.nodes import (
    REDUCTION_TYPES,
    Buffer,
    ComputedBuffer,
    ConstantBuffer,
    ExternKernel,
    InputBuffer,
    LoweredGraph,
    ObjectInput,
    Operation,
    Pointwise,
    Reduction,
    ReinterpretView,
    Scatter,
    SymbolBinding,
    SymbolInput,
    TensorRef,
    load,
    used_symbols,
)
from coil.lowering_ir.ops.extern import register_externs
from coil.lowering_ir.registry import LOWERINGS, lowering_for, register, registered_ops
from coil.lowering_ir.split_rule import SplitRule
from coil.lowering_ir.values import OPS, Constant, IndexValue, Load, Op, Value, loads, map_indices

__all__ = [
    "LOWERINGS",
    "OPS",
    "REDUCTION_TYPES",
    "Buffer",
    "ComputedBuffer",
    "Constant",
    "ConstantBuffer",
    "Expr",
    "ExternKernel",
    "IndexValue",
    "InputBuffer",
    "Layout",
    "Load",
    "LoweredGraph",
    "LoweringError",
    "ObjectInput",
    "Op",
    "Operation",
    "Pointwise",
    "Reduction",
    "ReinterpretView",
    "Scatter",
    "SplitRule",
    "SymbolBinding",
    "SymbolInput",
    "TensorRef",
    "Unsupported",
    "Value",
    "as_expr",
    "contiguous_strides",
    "decomposition_table",
    "load",
    "loads",
    "lower",
    "lowering_for",
    "map_indices",
    "register",
    "register_externs",
    "registered_ops",
    "used_symbols",
]
