"""Typed configuration of the backend: `COIL_*` environment variables, overridable in code.

Read a knob as an attribute (`knobs.fallback_on_error`); override for a scope with
`with knobs.override(fusion=False): ...`. Nothing else in coil.backend reads os.environ.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Knob:
    """One setting: its environment variable, default and type."""

    env: str
    default: Any
    kind: type
    doc: str

    def read(self) -> Any:
        raw = os.environ.get(self.env)
        if raw is None:
            return self.default
        if self.kind is bool:
            if raw.lower() in ("1", "true", "yes", "on"):
                return True
            if raw.lower() in ("0", "false", "no", "off", ""):
                return False
            raise ValueError(f"{self.env}={raw!r}: expected 0/1")
        return self.kind(raw)


KNOBS: dict[str, Knob] = {
    "fallback_on_error": Knob("COIL_FALLBACK_ON_ERROR", True, bool,
                              "on a compile error, run that graph eagerly with one warning (off: raise)"),
    "fusion": Knob("COIL_FUSION", True, bool, "fuse operations into shared kernels"),
    "fusion_visit_order": Knob("COIL_FUSION_VISIT_ORDER", True, bool,
                               "fusion may order pointwise ops as a reduction of their kernel visits memory"),
    "reuse": Knob("COIL_REUSE", True, bool, "reuse freed buffers (memory planner, reuse mode)"),
    "reduction_strategy": Knob("COIL_REDUCTION_STRATEGY", "auto", str,
                               "auto | persistent | looped | outer: how reductions are generated"),
    "autotune": Knob("COIL_AUTOTUNE", "auto", str,
                     "auto (or 1) | always | 0: time each reduction kernel's candidate launch configurations at "
                     "compile time and keep the fastest correct one (cached in <COIL_CACHE_DIR>/autotune/); auto: "
                     "kernels compiled for a GPU only, always: under Triton's interpreter too (tests)"),
    "autotune_min_bytes": Knob("COIL_AUTOTUNE_MIN_BYTES", 32 << 20, int,
                               "autotune only kernels whose buffers hold at least this many "
                               "bytes (smaller kernels run for microseconds: tuning them costs compile time, "
                               "measured ~80 s per model on the H200, and gains nothing measurable)"),
    "autotune_extra_min_bytes": Knob("COIL_AUTOTUNE_EXTRA_MIN_BYTES", 256 << 20, int,
                                     "pointwise kernels' candidates and persistent kernels' read-again "
                                     "alternative only for kernels whose buffers hold at least this many bytes "
                                     "(their gains, 0.2-1 % on the micro suite's 512 MiB-1 GiB kernels, pay for "
                                     "their compiles only on such kernels)"),
    "verify": Knob("COIL_VERIFY", False, bool, "check graph and IR invariants after every stage"),
    "order_time": Knob("COIL_ORDER_TIME", 0.5, float,
                       "seconds the memory planner may search for a lower-peak order of the fused steps (0: off)"),
    "cuda_graphs": Knob("COIL_CUDA_GRAPHS", True, bool,
                        "replay inference graphs as CUDA graphs (CUDA, static shapes; outputs are the caller's to keep, "
                        "non-parameter inputs are copied in; steps a graph cannot capture run eagerly between "
                        "captured segments)"),
    "cuda_graphs_training": Knob("COIL_CUDA_GRAPHS_TRAINING", True, bool,
                                 "also replay forward/backward graphs as CUDA graphs (outputs handed out uncloned "
                                 "and not held, saved activations reused by the backward once read, guarded by "
                                 "storage liveness; needs COIL_CUDA_GRAPHS)"),
    "cuda_graph_lazy_clones": Knob("COIL_CUDA_GRAPH_LAZY_CLONES", True, bool,
                                   "inference CUDA graphs hand their outputs out uncloned and copy one away "
                                   "before the next replay only if the caller still holds it "
                                   "(coil.runtime.lazy_outputs); 0: clone every output after every replay"),
    "recompute_param_casts": Knob("COIL_RECOMPUTE_PARAM_CASTS", True, bool,
                                  "training graphs save a parameter instead of its dtype cast (autocast's bf16 "
                                  "weights, 1 MiB or more) and the backward recomputes the cast just before "
                                  "its first use, instead of holding every layer's copy from the forward on"),
    "indirect_inputs": Knob("COIL_INDIRECT_INPUTS", "auto", str,
                            "auto | always | 0: a backward graph's tangents of at least 1 MiB that only Triton kernels "
                            "read are read at the caller's address, loaded from a pointer table, instead of being "
                            "copied into a CUDA graph's own buffer; auto: backward graphs replayed as CUDA graphs, "
                            "always: every backward graph (tests on the CPU)"),
    "cuda_graph_segments_uncaptured": Knob("COIL_CUDA_GRAPH_SEGMENTS_UNCAPTURED", False, bool,
                                           "run a graph's CUDA-graph segments one by one without capturing them, "
                                           "on any device (tests the segment split)"),
    "graph_cache": Knob("COIL_GRAPH_CACHE", True, bool,
                        "reuse whole compiled graphs from <COIL_CACHE_DIR>/graphs/ (keyed by graph, input metadata, "
                        "knobs and versions); bypassed while COIL_DEBUG_DIR or a pipeline COIL_LOGS artefact is set"),
    "aot_cache": Knob("COIL_AOT_CACHE", True, bool,
                      "reuse AOTAutograd's result (partitioned graphs + coil's compiled code) from torch's "
                      "AOTAutograd cache in <TORCHINDUCTOR_CACHE_DIR>/aotautograd/, skipping AOTAutograd and "
                      "coil's pipeline on a hit; needs COIL_GRAPH_CACHE; compiles the backward with the forward"),
    "frontend_cache": Knob("COIL_FRONTEND_CACHE", True, bool,
                           "reuse a compiled inference graph keyed on the Dynamo graph itself, from "
                           "<COIL_CACHE_DIR>/frontend/, skipping AOTAutograd, its cache key and its imports on a hit "
                           "(coil.backend.caches.frontend_cache); needs COIL_GRAPH_CACHE"),
    "prehash": Knob("COIL_PREHASH", True, bool,
                    "on importing coil.backend, hash torch's and Triton's sources (the keys of AOTAutograd's and "
                    "Triton's caches, which every process's first compile computes) on a daemon thread, so that "
                    "the hashing overlaps model set-up and Dynamo's tracing"),
    # debugging (docs/debugging.md)
    "logs": Knob("COIL_LOGS", "", str,
                 "comma list of artefacts to log at INFO on logger coil.<artefact>: "
                 "graph, fusion, kernels, wrapper, memory_plan, compile_time, autotune (or all)"),
    "debug_dir": Knob("COIL_DEBUG_DIR", "", str,
                      "write every compiled graph's artefacts and a repro.py to <dir>/<graph name>/"),
    "progress": Knob("COIL_PROGRESS", True, bool, "progress bar while kernels compile (TTY and tqdm only)"),
    "check_nan": Knob("COIL_CHECK_NAN", False, bool, "raise when a graph output holds NaN or Inf"),
    "check_lifetimes": Knob("COIL_CHECK_LIFETIMES", False, bool,
                            "track every allocation at run time and check it against the memory plan"),
    "debug_asserts": Knob("COIL_DEBUG_ASSERTS", False, bool,
                          "bounds-check every data-dependent load and scatter store inside kernels "
                          "(Triton device_assert)"),
    "check_inputs": Knob("COIL_CHECK_INPUTS", False, bool,
                         "check each input's shape, stride, dtype and device in the wrapper also under "
                         "Dynamo (compile_graph called directly always checks)"),
}


class _Knobs:
    def __init__(self) -> None:
        self._overrides: dict[str, Any] = {}

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if name in self._overrides:
            return self._overrides[name]
        try:
            return KNOBS[name].read()
        except KeyError:
            raise AttributeError(f"no knob {name!r}; known: {sorted(KNOBS)}") from None

    @contextlib.contextmanager
    def override(self, **values: Any) -> Iterator[None]:
        """Set knobs for the duration of a `with` block (tests, scoped experiments)."""
        for k in values:
            if k not in KNOBS:
                raise KeyError(f"no knob {k!r}; known: {sorted(KNOBS)}")
        old = dict(self._overrides)
        self._overrides.update(values)
        try:
            yield
        finally:
            self._overrides = old


knobs = _Knobs()
