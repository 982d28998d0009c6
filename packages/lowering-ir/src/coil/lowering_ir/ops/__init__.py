"""Native lowerings, registered into coil.lowering_ir.registry on import."""

from coil.lowering_ir.ops import extern, indexing, pointwise, random, reductions, views

__all__ = ["extern", "indexing", "pointwise", "random", "reductions", "views"]
