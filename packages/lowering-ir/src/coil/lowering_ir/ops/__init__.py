"""Native lowerings, registered into coil.lowering_ir.registry on import."""

from coil.lowering_ir.ops import (
    asserts,
    avg_pooling,
    bessel,
    extern,
    indexing,
    pointwise,
    pointwise_ieee,
    pooling,
    put,
    random,
    reduce_by_index,
    reductions,
    remap,
    special,
    strided_scatter,
    views,
)

__all__ = [
    "asserts", "avg_pooling", "bessel", "extern", "indexing", "pointwise", "pointwise_ieee", "pooling", "put", "random", "reduce_by_index",
    "reductions", "remap", "special", "strided_scatter", "views",
]
