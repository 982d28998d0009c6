"""coil.runtime's configuration: every environment variable the runtime reads, in one place.

Each knob is a typed descriptor on `RuntimeKnobs`. Reading one returns, in order: a value set by
`override(...)` (scoped, for tests), else the parsed environment variable, else the default. The
environment is read on every access (no caching), so a variable set before the first use is seen.
A malformed value raises `ValueError` naming the variable; it is never silently replaced.

Knobs:
  COIL_CACHE_DIR        cache_dir         Path  root of coil's on-disk cache (default ~/.cache/coil);
                                                kernel sources live under <cache_dir>/kernels/
  COIL_COMPILE_THREADS  compile_threads   int   threads compiling kernels ahead of time on a GPU
                                                (default min(32, usable CPUs / LOCAL_WORLD_SIZE);
                                                1 = serial) when
                                                compile workers are off
  COIL_COMPILE_WORKERS  compile_workers   int   worker processes compiling GPU kernels
                                                (compile_pool; default as for threads; 0 = none:
                                                compile on threads of this process)
  COIL_AOT_COMPILE      aot_compile       bool  compile GPU kernels in compile_kernels rather than
                                                at their first launch (default on)
  COIL_FAST_LAUNCH      fast_launch       bool  launch GPU kernels through their bound launcher,
                                                skipping JITFunction.run (default on; read when
                                                a Kernel is created)
  COIL_GRAPH_POOL_EXPANDABLE
                        graph_pool_expandable
                                          bool  create the CUDA-graph pool's segments expandable
                                                (pool_segments; default on)
  TRITON_INTERPRET      triton_interpret  bool  Triton's own switch, read here (not in triton) so
                                                that asking never imports triton; when set, every
                                                kernel runs under the interpreter, GPU ones too

Usage::

    from coil.runtime.knobs import knobs, override
    knobs.cache_dir                      # Path
    with override(cache_dir=tmp_path, compile_threads=1):
        ...
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Generic, TypeVar, overload

T = TypeVar("T")

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off", ""})


def _parse_bool(name: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(f"{name}={raw!r} is not a boolean (use 1/0, true/false, yes/no, on/off)")


def _int_at_least(minimum: int) -> Callable[[str, str], int]:
    """A parser of integer knobs that rejects values below `minimum`."""

    def parse(name: str, raw: str) -> int:
        try:
            value = int(raw.strip())
        except ValueError:
            raise ValueError(f"{name}={raw!r} is not an integer") from None
        if value < minimum:
            raise ValueError(f"{name}={raw!r} must be >= {minimum}")
        return value

    return parse


def _parse_path(name: str, raw: str) -> Path:
    if not raw.strip():
        raise ValueError(f"{name} is set but empty")
    return Path(raw).expanduser()


class _EnvKnob(Generic[T]):
    """One typed knob: an environment variable, its parser and its default."""

    def __init__(self, env: str, parse: Callable[[str, str], T], default: Callable[[], T]) -> None:
        self.env = env
        self._parse = parse
        self._default = default
        self.attr = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.attr = name

    @overload
    def __get__(self, obj: None, owner: type) -> _EnvKnob[T]: ...
    @overload
    def __get__(self, obj: RuntimeKnobs, owner: type) -> T: ...
    def __get__(self, obj: RuntimeKnobs | None, owner: type) -> T | _EnvKnob[T]:
        if obj is None:
            return self
        overrides = obj._overrides
        if self.attr in overrides:
            return overrides[self.attr]  # type: ignore[no-any-return]
        raw = os.environ.get(self.env)
        if raw is None:
            return self._default()
        return self._parse(self.env, raw)

    def coerce(self, value: object) -> T:
        """Validate an override value by the same rules as the environment variable."""
        return self._parse(self.env, str(value))


def _default_threads() -> int:
    """min(32, the CPUs this process may run on (its affinity mask, else the CPU count)), divided
    among the processes of one host when a launcher says how many there are (torchrun's
    LOCAL_WORLD_SIZE): eight ranks on one host each get an eighth, not 32 workers apiece."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    local = os.environ.get("LOCAL_WORLD_SIZE", "").strip()
    share = int(local) if local.isdigit() and int(local) > 0 else 1
    return max(1, min(32, cpus // share))


class RuntimeKnobs:
    """The runtime's knobs; use the module-level `knobs` instance."""

    cache_dir = _EnvKnob("COIL_CACHE_DIR", _parse_path, lambda: Path.home() / ".cache" / "coil")
    compile_threads = _EnvKnob("COIL_COMPILE_THREADS", _int_at_least(1), _default_threads)
    compile_workers = _EnvKnob("COIL_COMPILE_WORKERS", _int_at_least(0), _default_threads)
    aot_compile = _EnvKnob("COIL_AOT_COMPILE", _parse_bool, lambda: True)
    fast_launch = _EnvKnob("COIL_FAST_LAUNCH", _parse_bool, lambda: True)
    graph_pool_expandable = _EnvKnob("COIL_GRAPH_POOL_EXPANDABLE", _parse_bool, lambda: True)
    triton_interpret = _EnvKnob("TRITON_INTERPRET", _parse_bool, lambda: False)

    def __init__(self) -> None:
        self._overrides: dict[str, Any] = {}

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The knob attribute names, in definition order."""
        return tuple(k for k, v in vars(cls).items() if isinstance(v, _EnvKnob))

    def env_names(self) -> dict[str, str]:
        """knob attribute -> the environment variable it reads."""
        return {name: getattr(type(self), name).env for name in self.names()}


knobs = RuntimeKnobs()
_override_lock = threading.Lock()


@contextmanager
def override(**values: object) -> Iterator[RuntimeKnobs]:
    """Set knobs for the duration of a `with` block, then restore the previous state.

    Values are validated like their environment variables (`compile_threads=0` raises). Overrides
    are process-wide (not per thread) and nest: the innermost wins. They are seen by this process
    only: a subprocess reads the environment, so pass `knobs.env_names()` there yourself.
    """
    cls = type(knobs)
    unknown = sorted(set(values) - set(cls.names()))
    if unknown:
        raise AttributeError(f"unknown coil.runtime knob(s): {', '.join(unknown)}")
    parsed = {name: getattr(cls, name).coerce(value) for name, value in values.items()}
    with _override_lock:
        saved = dict(knobs._overrides)
        knobs._overrides.update(parsed)
    try:
        yield knobs
    finally:
        with _override_lock:
            knobs._overrides.clear()
            knobs._overrides.update(saved)
