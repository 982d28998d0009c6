"""The on-disk cache of kernel module sources, and a store of keyed text blobs.

Layout::

    <COIL_CACHE_DIR>/kernels/<key[:2]>/<key>.py
    <COIL_CACHE_DIR>/<namespace>/<key[:2]>/<key>.blob   (blobs; coil.backend's graph cache: graphs/)

`key` is the sha256 of (cache format, triton version, torch version, module source), so a new
Triton or torch gets fresh entries. An entry is the module source under a three-line header that
records the key; the loader compiles the exact text it validated, and never writes `.pyc` files.

Concurrency: entries are written to a temporary file in the same directory and moved into place
with `os.replace` (atomic on POSIX and Windows), so a reader sees an old whole file or a new whole
file, never a partial one; two processes writing the same entry write identical bytes.

Corruption: an entry is valid only if it decodes as UTF-8 and equals, byte for byte, what would be
written now (header with the right key included). Anything else (unreadable, truncated, wrong key
recorded, edited) is discarded and rewritten, with a warning on the `coil.runtime` logger.

Blobs (`write_blob`/`read_blob`) hold any text a caller keys itself (coil.backend stores whole
compiled graphs there). A blob is one header line recording the format, the key, the payload's
length and its sha256, then the payload; it is written atomically like a kernel entry. A blob that
is missing, unreadable, truncated, edited or recorded under another key reads as None (an INFO
line on the `coil.runtime` logger for a damaged one, no warning): the caller rebuilds it and
writes it again, which replaces the damaged file.
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


BLOB_FORMAT = "coil-blob-v1"


def blob_path(cache_dir: Path, namespace: str, key: str) -> Path:
    """Where the blob `key` of `namespace` (a folder name, e.g. "graphs") lives under `cache_dir`."""
    if not namespace.isidentifier() or not key.isalnum():
        raise ValueError(f"bad blob namespace or key: {namespace!r}, {key!r}")
    return cache_dir / namespace / key[:2] / f"{key}.blob"


def _blob_header(key: str, data: bytes) -> bytes:
    return f"{BLOB_FORMAT} {key} {len(data)} {hashlib.sha256(data).hexdigest()}\n".encode("ascii")


def write_blob(path: Path, key: str, payload: str) -> None:
    """Store `payload` under `key` at `path` atomically (temporary file + `os.replace`).

    Concurrent writers of one key are safe: a reader sees one whole file. Raises `OSError` when
    the blob cannot be written."""
    data = payload.encode("utf-8")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem[:16]}-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(_blob_header(key, data))
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def read_blob(path: Path, key: str) -> str | None:
    """The payload stored under `key` at `path`, or None when there is no valid blob.

    Valid means: the header names this format and `key`, and the payload has the recorded length
    and sha256 and decodes as UTF-8. Anything else is reported at INFO and reads as None (the
    caller rebuilds and rewrites it); this function never raises for a bad or missing file."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        _log.info("coil: unreadable cache blob %s (%s): rebuilding it", path, exc)
        return None
    head, sep, data = raw.partition(b"\n")
    try:
        fmt, got_key, length, digest = head.decode("ascii").split(" ")
        ok = (sep == b"\n" and fmt == BLOB_FORMAT and got_key == key and int(length) == len(data)
              and hashlib.sha256(data).hexdigest() == digest)
        text = data.decode("utf-8") if ok else None
    except (UnicodeDecodeError, ValueError):
        text = None
    if text is None:
        _log.info("coil: corrupted cache blob %s: rebuilding it", path)
    return text
