"""coil.backend: the torch.compile backend that wires coil's packages together.

Public API: `coil_backend` (also registered as backend="coil"), `compile_graph`, `knobs` and
`KNOBS` (coil's knob registry, `coil.knobs`), `CoilCompileError`, `CoilCheckError`, `GraphStats`,
`COMPILED`, `measure_peaks` (measured allocated peaks of compiled graphs against the memory
planner's: coil.backend.debug.peaks).
Debugging (knobs COIL_LOGS, COIL_DEBUG_DIR, COIL_CHECK_*): docs/debugging.md.

Importing coil.backend is cheap: it imports neither torch's compiler nor Triton nor coil's
stages. `coil_backend` and `compile_graph` import the pipeline (coil.backend.pipeline) at their
first use, as torch does through the entry point when it looks up backend="coil".
The import starts hashing Triton's sources on a thread (coil.backend.caches.prehash).
"""

import importlib
from typing import TYPE_CHECKING, Any

from coil.backend.caches.prehash import start as _start_prehash
from coil.backend.debug.peaks import measure_peaks
from coil.backend.errors import CoilCheckError, CoilCompileError
from coil.backend.stats import COMPILED, GraphStats, reset
from coil.knobs import KNOBS, knobs  # coil's knob registry, re-exported

if TYPE_CHECKING:
    from coil.backend.pipeline.backend import coil_backend
    from coil.backend.pipeline.compile import compile_graph

_start_prehash()

# names served by `__getattr__` from the module that defines them, imported at the first access
_LAZY = {"coil_backend": "coil.backend.pipeline.backend", "compile_graph": "coil.backend.pipeline.compile"}


def __getattr__(name: str) -> Any:
    """`coil_backend` and `compile_graph` (the same objects as the pipeline's), imported at first use."""
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


__all__ = ["COMPILED", "KNOBS", "CoilCheckError", "CoilCompileError", "GraphStats", "coil_backend", "compile_graph", "knobs",
           "measure_peaks", "reset"]
