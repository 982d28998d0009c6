"""Native lowerings, registered into coil.lowering_ir.registry on import."""

from coil.lowering_ir.ops import (
    bessel,
    extern,
    indexing,
    pointwise,
    random,
    reduce_by_index,
    reductions,
    remap,
    special,
    views,
)

__all__ = [
    "bessel", "extern", "indexing", "pointwise", "random", "reduce_by_index", "reductions", "remap",
    "special", "views",
]
