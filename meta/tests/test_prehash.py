"""coil.backend.caches.prehash: importing coil.backend hashes Triton's sources on a thread, the
pipeline's import torch's (COIL_PREHASH), and the keys it leaves cached are those a process
without it computes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from coil.knobs import knobs

# In a fresh process: import coil.backend, wait for its hashing thread, and report whether one
# ran, whether Triton's key was already cached before anyone asked for it, and both keys.
_CHILD = """
import json, threading
import coil.backend
threads = [t for t in threading.enumerate() if t.name == "coil-prehash"]
from torch._inductor.codecache import torch_key
from torch._inductor.runtime.triton_compat import HAS_TRITON, triton_key
for t in threads:
    t.join(120)
cached = triton_key.cache_info().currsize if HAS_TRITON else None
tk = torch_key()
print(json.dumps({"threads": len(threads), "triton_cached": cached, "triton": triton_key() if HAS_TRITON else None,
                  "torch": tk.hex() if isinstance(tk, bytes) else str(tk)}))
"""


def _child(prehash: str) -> dict[str, object]:
    env = knobs.environ(prehash=prehash)
    p = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    out: dict[str, object] = json.loads(p.stdout.strip().splitlines()[-1])
    return out


def test_the_thread_leaves_the_keys_torch_computes_cached() -> None:
    on, off = _child("1"), _child("0")
    assert on["threads"] == 1 and off["threads"] == 0
    if on["triton"] is None:
        pytest.fail("Triton is not installed: the thread hashes only torch's sources here")
    assert on["triton_cached"] == 1  # computed by the thread, before this process asked
    assert off["triton_cached"] == 0  # without it, nothing computed the key at import
    assert on["triton"] == off["triton"] and on["torch"] == off["torch"]  # the same values either way


def test_start_runs_once_per_process() -> None:
    from coil.backend.caches import prehash
    assert prehash.start() is None  # importing coil.backend started it (or the knob is off)


def test_torch_key_is_hashed_on_a_thread_once_handed_in(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pipeline hands prehash torch's key function once its imports brought it in; prehash
    calls it on a thread, once per process, and not at all with the knob off."""
    from coil.backend.caches import prehash

    calls: list[int] = []
    monkeypatch.setattr(prehash, "_started", set())
    with knobs.override(prehash=False):
        assert prehash.hash_torch(lambda: calls.append(0)) is None
    with knobs.override(prehash=True):
        thread = prehash.hash_torch(lambda: calls.append(1))
        assert thread is not None and thread.name == prehash.THREAD_NAME
        thread.join(60)
        assert prehash.hash_torch(lambda: calls.append(2)) is None
    assert calls == [1]
