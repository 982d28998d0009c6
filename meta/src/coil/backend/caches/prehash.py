"""Hash Triton's and torch's sources on threads, off the critical path of the first compile.

Contract: `start()` (run by `import coil.backend`) starts, once per process, a daemon thread named
"coil-prehash" that imports Triton and calls its `triton_key()`, and returns it; None when the
knob `prehash` (COIL_PREHASH) is off or the thread was already started. Without Triton the thread
does nothing. `hash_torch(torch_key)` (run by coil's pipeline once its imports have brought in
torch's compiler) starts, once and under the same knob, a thread of the same name that calls the
`torch_key` it is given. The threads change no result: each key is a cached function of the
installed files, and whoever asks for it first computes it (the caller, when it comes before the
thread is done; either way once or twice, the same value). An error on a thread is dropped: the
caller computing the key sees it.

Why: the first compile of every process, cold or warm, computes both keys (AOTAutograd's cache
key and Triton's kernel cache include them; Triton's hashes its shared library). Hashing reads
files and feeds hashlib large buffers, both without the GIL, so on a thread it overlaps the
model's construction and Dynamo's tracing instead of following them (docs/perf.md).

What each thread imports, and why: Triton's thread imports Triton, which imports nothing of
torch's, so it cannot collide with the main thread's imports. torch's key lives in
`torch._inductor.codecache`, whose import pulls in Dynamo; two threads importing torch's
mutually importing compiler modules at once can fail with an import deadlock error. So the key
waits until the main thread has imported it (the pipeline passes the function in), and
importing coil.backend imports no part of torch's compiler.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from coil.knobs import knobs

THREAD_NAME = "coil-prehash"
_started: set[str] = set()
_lock = threading.Lock()


def _triton_key() -> None:
    """Triton's source key as torch's caches read it (torch looks in these two places too)."""
    try:
        from triton.runtime.cache import triton_key
    except ImportError:
        try:
            from triton.compiler.compiler import triton_key
        except ImportError:  # no Triton: no key to hash
            return
    triton_key()


def _quietly(key: Callable[[], object]) -> None:
    try:
        key()
    except Exception:  # the caller that needs the key raises it again
        return


def _spawn(which: str, key: Callable[[], object]) -> threading.Thread | None:
    """Start `key` on a daemon thread unless the knob is off or `which` was already started."""
    with _lock:
        if which in _started or not knobs.prehash:
            return None
        _started.add(which)
    thread = threading.Thread(target=_quietly, args=(key,), name=THREAD_NAME, daemon=True)
    thread.start()
    return thread


def start() -> threading.Thread | None:
    """Hash Triton's sources on a daemon thread (module docstring); the thread, or None."""
    return _spawn("triton", _triton_key)


def hash_torch(torch_key: Callable[[], object]) -> threading.Thread | None:
    """Call torch's `torch_key` (already imported by the caller) on a daemon thread; the thread,
    or None (module docstring)."""
    return _spawn("torch", torch_key)
