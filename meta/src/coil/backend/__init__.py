"""coil.backend: the torch.compile backend that wires coil's packages together.

Public API: `coil_backend` (also registered as backend="coil"), `compile_graph`, `knobs` and
`KNOBS` (coil's knob registry, `coil.knobs`), `CoilCompileError`, `CoilCheckError`, `GraphStats`,
`COMPILED`.
Debugging (knobs COIL_LOGS, COIL_DEBUG_DIR, COIL_CHECK_*): docs/debugging.md.
"""

from coil.backend.caches.prehash import start as _start_prehash
from coil.backend.errors import CoilCheckError, CoilCompileError
from coil.backend.pipeline.compile import coil_backend, compile_graph
from coil.backend.stats import COMPILED, GraphStats, reset
from coil.knobs import KNOBS, knobs  # coil's knob registry, re-exported

_start_prehash()

__all__ = ["COMPILED", "KNOBS", "CoilCheckError", "CoilCompileError", "GraphStats", "coil_backend", "compile_graph", "knobs", "reset"]
