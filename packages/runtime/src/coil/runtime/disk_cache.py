"""The on-disk cache of kernel module sources.

Layout::

    <COIL_CACHE_DIR>/kernels/<key[:2]>/<key>.py

`key` is the sha256 of (cache format, triton version, torch version, module source), so a new
Triton or torch gets fresh entries. An entry is the module source under a three-line header that
records the key; the loader compiles the exact text it validated, and never writes `.pyc` files.

Concurrency: entries are written to a temporary file in the same directory and moved into place
with `os.replace` (atomic on POSIX and Windows), so a reader sees an old whole file or a new whole
file, never a partial one; two processes writing the same entry write identical bytes.

Corruption: an entry is valid only if it decodes as UTF-8 and equals, byte for byte, what would be
written now (header with the right key included). Anything else (unreadable, truncated, wrong key
recorded, edited) is discarded and rewritten, with a warning on the `coil.runtime` logger.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

FORMAT_VERSION = 1
_log = logging.getLogger("coil.runtime")

EntryStatus = Literal["hit", "written", "rebuilt"]


def source_key(source: str, triton_version: str, torch_version: str) -> str:
    """The cache key (64 hex digits) of one module source for one Triton and torch."""
    h = hashlib.sha256()
    for part in (f"coil-kernel-v{FORMAT_VERSION}", triton_version, torch_version, source):
        h.update(part.encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()


def entry_path(cache_dir: Path, key: str) -> Path:
    """Where the entry of `key` lives under `cache_dir`."""
    return cache_dir / "kernels" / key[:2] / f"{key}.py"


def render_entry(key: str, source: str) -> str:
    """The exact text of a valid entry for `key` holding `source`."""
    body = source if source.endswith("\n") else source + "\n"
    return (
        "# coil kernel cache entry: generated, do not edit (an edited entry is rebuilt)\n"
        f"# coil-cache-key: {key}\n"
        "#\n"
        f"{body}"
    )


@dataclass
class CacheStats:
    """Counts of `ensure_entry` outcomes in this process (a test and debugging hook)."""

    hits: int = 0
    writes: int = 0
    rebuilds: int = 0


_stats = CacheStats()
_stats_lock = threading.Lock()


def cache_stats() -> CacheStats:
    """A snapshot of this process's counts."""
    with _stats_lock:
        return CacheStats(_stats.hits, _stats.writes, _stats.rebuilds)


def reset_cache_stats() -> None:
    """Zero the counts."""
    with _stats_lock:
        _stats.hits = _stats.writes = _stats.rebuilds = 0


def ensure_entry(path: Path, text: str) -> EntryStatus:
    """Make `path` hold exactly `text`; report whether it already did.

    Returns "hit" (valid entry reused, untouched), "written" (no entry) or "rebuilt" (an invalid
    entry was replaced). Raises `OSError` only when the entry cannot be written.
    """
    status: EntryStatus
    try:
        current = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        status = "written"
    except (OSError, UnicodeDecodeError) as exc:
        _log.warning("coil: discarding unreadable kernel cache entry %s (%s)", path, exc)
        status = "rebuilt"
    else:
        if current == text:
            _count("hit")
            return "hit"
        _log.warning("coil: discarding corrupted kernel cache entry %s", path)
        status = "rebuilt"
    _atomic_write(path, text)
    _count(status)
    return status


def _count(status: EntryStatus) -> None:
    with _stats_lock:
        if status == "hit":
            _stats.hits += 1
        elif status == "written":
            _stats.writes += 1
        else:
            _stats.rebuilds += 1


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem[:16]}-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(text.encode("utf-8"))
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
