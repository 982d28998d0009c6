"""Lanes of one machine: timing never overlaps another lane's work.

`gpu_bench.sh` deals a run's model cases out to one `coil bench` per GPU (a *lane*), and the
lanes share the host's CPUs. A host-bound step (a small model, a transformer replaying a graph
per layer) is then timed slower while another lane compiles on every core, by as much as what
the other lane happens to do at that moment (docs/perf.md, "How we measure"). So lanes that
share a lock file (`--lane-lock PATH`, the same path for every lane) take turns:

- `working(path)`: the CPU-heavy part of a mode (its first-call processes, its compile and first
  steps, the accuracy calls) holds the lock *shared*: lanes work side by side;
- `timing_alone(path)`: the timed part (do_bench, the loop) holds it *exclusive*: it starts once
  no other lane is working or timing, and no lane starts working until it ends.

Building a case's model and its references is light on the host and is not held. With `path`
None (one lane) both are no-ops. The locks are `fcntl.flock` on the file and on `path + ".turn"`
(created if missing), released when the block ends or the process dies. A lane waiting to time
holds the turn file while it waits, so lanes that want to start working queue behind it: with
three lanes or more, working lanes could otherwise overlap one another for ever and keep a
timing lane waiting. The two are never nested: a lane works, then times.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator

__all__ = ["timing_alone", "working"]


@contextlib.contextmanager
def _held(path: str | None, mode: int) -> Iterator[None]:
    if path is None:
        yield
        return
    turn = os.open(path + ".turn", os.O_RDWR | os.O_CREAT, 0o644)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(turn, fcntl.LOCK_EX)  # in line behind a lane waiting to time
            fcntl.flock(fd, mode)
        finally:
            os.close(turn)  # closing a descriptor releases its lock
        yield
    finally:
        os.close(fd)


def working(path: str | None) -> contextlib.AbstractContextManager[None]:
    """Hold the lanes' lock at `path` shared (module docstring); a no-op for None."""
    return _held(path, fcntl.LOCK_SH)


def timing_alone(path: str | None) -> contextlib.AbstractContextManager[None]:
    """Hold the lanes' lock at `path` exclusive (module docstring); a no-op for None."""
    return _held(path, fcntl.LOCK_EX)
