"""Importing coil.backend is cheap: no torch compiler, Triton, sympy, coil stage or bench module
is imported on the importing thread; `coil_backend` and `compile_graph` bring in the pipeline at
their first use and are the pipeline's own objects."""

from __future__ import annotations

import json
import subprocess
import sys

from coil.knobs import knobs

HEAVY = ("torch", "triton", "sympy", "transformers", "coil.lowering_ir", "coil.scheduler", "coil.triton_codegen",
         "coil.wrapper_codegen", "coil.runtime", "coil.fx_passes", "coil.bench", "coil.backend.pipeline",
         "coil.backend.caches.graph_cache", "coil.backend.caches.aot_cache")

# COIL_PREHASH=0: Triton's hashing thread (which imports Triton) is the one import allowed, off
# the importing thread; without it nothing heavy may appear at all
_CHILD = """
import json, sys
import coil.backend
imported = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "triton", "sympy", "transformers")
                  or m.startswith("coil."))
from coil.backend import coil_backend
from coil.backend.pipeline.backend import coil_backend as pipeline_backend
from coil.backend.pipeline.compile import compile_graph
print(json.dumps({"imported": imported, "same": coil_backend is pipeline_backend
                  and coil.backend.compile_graph is compile_graph}))
"""


def test_importing_coil_backend_imports_nothing_heavy() -> None:
    p = subprocess.run([sys.executable, "-c", _CHILD], env=knobs.environ(prehash=False), capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    heavy = [m for m in out["imported"] if any(m == h or m.startswith(h + ".") for h in HEAVY)]
    assert heavy == [], heavy
    assert out["same"]
