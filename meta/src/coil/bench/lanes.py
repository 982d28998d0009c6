"""Lanes of one machine: timing never overlaps another lane's work, or says it did.

`gpu_bench.sh` deals a run's model cases out to one `coil bench` per GPU (a *lane*), and the
lanes share the host's CPUs. A host-bound step (a small model, a transformer replaying a graph
per layer) is then timed slower while another lane compiles on every core, by as much as what
the other lane happens to do at that moment (docs/perf.md, "How we measure"). So lanes that
share a lock file (`--lane-lock PATH`, the same path for every lane) take turns:

- `working(path)`: the CPU-heavy part of a mode (its first-call processes, its compile and first
  steps, the accuracy calls) holds the lock *shared*: lanes work side by side;
- `timing_alone(path, wait_s)`: the timed part (do_bench, the loop) holds it *exclusive*: it
  starts once no other lane is working or timing, and no lane starts working until it ends. It
  waits at most `wait_s` seconds (a case has a time budget, and another lane's cold and warm
  first-call processes can work for minutes); then it times anyway and yields False, so the row
  can say it was timed beside other lanes' work.

Building a case's model and its references is light on the host and is not held. With `path`
None (one lane) both are no-ops (`timing_alone` yields True). The locks are `fcntl.flock` on the
file and on `path + ".turn"` (created if missing), released when the block ends or the process
dies. A lane waiting to time holds the turn file while it waits, so lanes that want to start
working queue behind it: with three lanes or more, working lanes could otherwise overlap one
another for ever and keep a timing lane waiting. The two are never nested: a lane works, then
times.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator

__all__ = ["timing_alone", "working"]

POLL_S = 0.05  # how often a bounded wait asks for the lock again


def _lock(fd: int, mode: int, until: float | None) -> bool:
    """`flock(fd, mode)`, waiting until the `time.monotonic()` deadline `until` (None: for ever);
    whether the lock was taken."""
    if until is None:
        fcntl.flock(fd, mode)
        return True
    while True:
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= until:
                return False
            time.sleep(POLL_S)


@contextlib.contextmanager
def _held(path: str | None, mode: int, wait_s: float | None = None) -> Iterator[bool]:
    if path is None:
        yield True
        return
    until = None if wait_s is None else time.monotonic() + wait_s
    turn = os.open(path + ".turn", os.O_RDWR | os.O_CREAT, 0o644)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            # in line behind a lane waiting to time, then the lock itself
            taken = _lock(turn, fcntl.LOCK_EX, until) and _lock(fd, mode, until)
        finally:
            os.close(turn)  # closing a descriptor releases its lock
        yield taken
    finally:
        os.close(fd)


def working(path: str | None) -> contextlib.AbstractContextManager[bool]:
    """Hold the lanes' lock at `path` shared (module docstring); a no-op for None."""
    return _held(path, fcntl.LOCK_SH)


def timing_alone(path: str | None, wait_s: float) -> contextlib.AbstractContextManager[bool]:
    """Hold the lanes' lock at `path` exclusive, waiting at most `wait_s` seconds; yields whether
    it was taken (module docstring). A no-op yielding True for None."""
    return _held(path, fcntl.LOCK_EX, wait_s)
