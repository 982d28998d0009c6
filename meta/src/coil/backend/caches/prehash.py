"""Hash torch's and Triton's sources on a thread from the moment coil is imported.

Contract: `start()` starts (once per process) a daemon thread that calls torch's `torch_key()`
and, with Triton installed, `triton_key()`, and returns it; None when the knob `prehash`
(COIL_PREHASH) is off, the keys are unavailable, or a thread was already started. The thread
changes no result: each key is a cached function of the installed files, and whoever asks for
it first computes it (the caller, when it comes before the thread is done; either way once or
twice, the same value). An error on the thread is dropped: the caller computing the key sees it.

Why: the first compile of every process, cold or warm, computes both keys (AOTAutograd's cache
key and Triton's kernel cache include them): on the device machine 0.52 s for Triton's (its
shared library hashed) and 0.18 s for torch's, in a warm start of 4-10 s (docs/perf.md, session
18). Hashing reads files and feeds hashlib large buffers, both without the GIL, so on a thread it
overlaps the model's construction and Dynamo's tracing instead of following them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from coil.knobs import knobs

_started = False
_lock = threading.Lock()


def _keys() -> list[Callable[[], object]]:
    """torch's and Triton's source keys as torch's caches read them (empty where unavailable)."""
    try:
        from torch._inductor.codecache import torch_key
        from torch._inductor.runtime.triton_compat import HAS_TRITON, triton_key
    except ImportError:
        return []
    return [triton_key, torch_key] if HAS_TRITON else [torch_key]


def _compute(keys: list[Callable[[], object]]) -> None:
    for key in keys:
        try:
            key()
        except Exception:  # the caller that needs the key raises it again
            continue


def start() -> threading.Thread | None:
    """Start hashing on a daemon thread (see the module's docstring); the thread, or None."""
    global _started
    with _lock:
        if _started or not knobs.prehash:
            return None
        keys = _keys()
        if not keys:
            return None
        _started = True
    thread = threading.Thread(target=_compute, args=(keys,), name="coil-prehash", daemon=True)
    thread.start()
    return thread
