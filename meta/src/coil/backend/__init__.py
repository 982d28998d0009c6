"""coil.backend: the torch.compile backend that wires coil's packages together.

Public API: `coil_backend` (also registered as backend="coil"), `compile_graph`, `knobs`,
`CoilCompileError`, `GraphStats`, `COMPILED`.
"""

from coil.backend.compile import coil_backend, compile_graph
from coil.backend.errors import CoilCompileError
from coil.backend.knobs import KNOBS, knobs
from coil.backend.stats import COMPILED, GraphStats, reset

__all__ = ["COMPILED", "KNOBS", "CoilCompileError", "GraphStats", "coil_backend", "compile_graph", "knobs", "reset"]
