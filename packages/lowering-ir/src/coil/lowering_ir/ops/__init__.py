"""Native lowerings, registered into coil.lowering_ir.registry on import."""

from coil.lowering_ir.ops import extern, indexing, pointwise, reductions, views

__all__ = ["extern", "indexing", "pointwise", "reductions", "views"]
