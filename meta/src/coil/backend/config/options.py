"""Per-compile settings: `torch.compile(model, backend="coil", mode=..., options={...})`.

torch hands a custom backend `mode` (when not "default") and `options` as keyword arguments.
`resolve` turns them into overrides of the knobs coil.backend owns in coil's registry (`coil.knobs`,
the coil.backend table of docs/configuration.md) for that one compile:

- `mode` (applied first): "default" (nothing), "reduce-overhead" (CUDA graphs for inference and
  training graphs: `cuda_graphs`, `cuda_graphs_training`), "max-autotune" (autotuning of every
  kernel on the GPU, whatever its size: `autotune="auto"`, `autotune_min_bytes=0`,
  `autotune_extra_min_bytes=0`; and each matrix product a GEMM template with its epilogue
  where that is timed faster than cuBLAS plus the epilogue kernel: `matmul_templates="auto"`),
  "max-autotune-no-cudagraphs" (the same, CUDA graphs off).
- `options`: a mapping from knob names to values, each of the knob's type (an int is accepted
  for a float knob, never a bool for a number): `options={"cuda_graphs_training": False}` keeps
  one training model out of CUDA graphs while the environment says otherwise.

The overrides hold while the backend compiles the graphs of that `torch.compile` call (forward,
backward and inference, also a backward AOTAutograd compiles lazily at its first call), so they
enter the graph-cache and AOT-cache keys like environment settings. Knobs read when the compiled
code runs rather than when it is compiled (cuda_graph_segments_uncaptured, COIL_PROGRESS, COIL_LOGS
for run-time messages) keep their process-wide values.

Raises ValueError naming the unknown mode, unknown option or mistyped value.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

from coil.knobs import KNOBS, knobs

MODES: dict[str, dict[str, Any]] = {
    "default": {},
    "reduce-overhead": {"cuda_graphs": True, "cuda_graphs_training": True},
    "max-autotune": {"autotune": "auto", "autotune_min_bytes": 0, "autotune_extra_min_bytes": 0,
                     "matmul_templates": "auto"},
    "max-autotune-no-cudagraphs": {"autotune": "auto", "autotune_min_bytes": 0, "autotune_extra_min_bytes": 0,
                                   "matmul_templates": "auto", "cuda_graphs": False,
                                   "cuda_graphs_training": False},
}

T = TypeVar("T")
# the knobs an option may name: those coil.backend owns
OPTIONS = {name: knob for name, knob in KNOBS.items() if knob.owner == "coil.backend"}


def resolve(mode: str | None = None, options: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The knob overrides for `mode` and `options` (see the module docstring)."""
    out: dict[str, Any] = {}
    if mode is not None:
        if mode not in MODES:
            raise ValueError(f"coil: unknown torch.compile mode {mode!r}; known: {', '.join(MODES)}")
        out.update(MODES[mode])
    for name, value in (options or {}).items():
        knob = OPTIONS.get(name)
        if knob is None:
            raise ValueError(f"coil: unknown option {name!r} in torch.compile(options=...); "
                             f"known: {', '.join(sorted(OPTIONS))}")
        out[name] = _typed(name, knob.kind, value)
    return out


def _typed(name: str, kind: type, value: object) -> object:
    ok = isinstance(value, kind) and (kind is bool or not isinstance(value, bool))
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not ok:
        raise ValueError(f"coil: option {name!r} expects a {kind.__name__}, got {value!r} "
                         f"({type(value).__name__})")
    return value


@contextlib.contextmanager
def applied(overrides: Mapping[str, Any]) -> Iterator[None]:
    """`knobs.override(**overrides)`, or nothing when there are none."""
    if not overrides:
        yield
        return
    with knobs.override(**overrides):
        yield


def scoped(fn: Callable[..., T], overrides: Mapping[str, Any]) -> Callable[..., T]:
    """`fn` run under `overrides` whenever it is called (a compiler AOTAutograd may call later)."""
    if not overrides:
        return fn
    frozen = dict(overrides)

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> T:
        with knobs.override(**frozen):
            return fn(*args, **kwargs)

    return call
