"""Host launchers built before the first launch, in parallel (`prebuild`).

A compiled Triton kernel launches through a host-side launcher that Triton builds lazily, at the
kernel's first launch (`CompiledKernel._init_handles`). On Triton 3.6 that launcher is a C module
generated for the kernel's signature and compiled by the system's C compiler (cached on disk by
its source, so once per signature and Triton cache); a cold compile of a training graph meets a
dozen new signatures at its first launches, each compiled in turn in the launching thread.

`prebuild(compiled, threads)` builds the launcher of every compiled kernel given that has none
yet, one kernel per signature (`signature_key`), on up to `threads` threads: the C compiler runs
as a subprocess, so the builds overlap. The launchers are then in Triton's cache, and each first
launch only loads its module. On Triton 3.9 the launcher is one generic module and a build costs
no compile. It never raises: a launcher that fails to build here is built, and its error raised,
at the first launch as before.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

_lock = threading.Lock()
_built: set[str] = set()


def signature_key(compiled: Any) -> str | None:
    """What a kernel's launcher is generated from: its parameter types and which parameters are
    constants (`compiled.src`), and Triton's cache folder; None when `compiled` does not say."""
    src = getattr(compiled, "src", None)
    signature = getattr(src, "signature", None)
    if not isinstance(signature, dict):
        return None
    import triton

    constants = getattr(src, "constants", None) or {}
    return repr((str(triton.knobs.cache.dir), sorted((str(k), str(v)) for k, v in signature.items()),
                 sorted(str(k) for k in constants)))


def _unbuilt(compiled: Any) -> bool:
    """True for a compiled kernel whose first launch has not happened (no module loaded yet)."""
    try:
        return object.__getattribute__(compiled, "module") is None
    except AttributeError:
        return False


def prebuild(compiled: Sequence[Any], threads: int) -> int:
    """Build the launchers of `compiled` (see the module docstring); returns how many were built."""
    todo: dict[str, Any] = {}
    for c in compiled:
        if not _unbuilt(c):
            continue
        key = signature_key(c)
        if key is None:
            continue
        with _lock:
            if key in _built:
                continue
            _built.add(key)
        todo.setdefault(key, c)
    if not todo:
        return 0
    from triton.runtime import driver

    def build(c: Any) -> bool:
        try:
            driver.active.launcher_cls(c.src, c.metadata)
        except Exception:  # the first launch builds it again and raises what is wrong
            return False
        return True

    kernels = list(todo.values())
    if threads <= 1 or len(kernels) == 1:
        return sum(build(c) for c in kernels)
    with ThreadPoolExecutor(max_workers=min(threads, len(kernels)), thread_name_prefix="coil-launcher") as pool:
        return sum(pool.map(build, kernels))
