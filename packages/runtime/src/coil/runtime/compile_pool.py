"""`CompilePool`: worker processes that compile this process's GPU kernels (`compile_worker`).

Triton compiles a kernel partly in Python and partly in C++ that holds the GIL, so threads of one
process overlap little (a process compiling on 16 threads keeps about two cores busy; docs/perf.md).
Worker processes compile in parallel for real.

Contract:
- `run(jobs)` queues each `CompileJob` for the next free worker and yields `(index, error)` as
  each one finishes (`error` is None on success, else the worker's message), every index
  exactly once, in completion order. A job equal to one queued or compiled earlier is not sent
  again (it finishes with that one; a failed one is sent again). A job whose worker died, or
  that no live worker is left for, is yielded with an error. It never raises for a job's sake:
  compiling in a worker only fills Triton's disk cache, and the caller's own warmup afterwards
  is what decides and reports.
- Workers are started by `start()` (or the first `run`), each `python -m
  coil.runtime.compile_worker` with this process's `sys.path` as PYTHONPATH; they stay up for
  the process's life (idle, blocked on their input) and end with it, or at `close()`.
- Thread-safe: concurrent `run` calls share one queue (first come, first served) and the
  workers, one request per worker at a time; nobody has to iterate a run's results.

`shared_pool()` is the process's pool with COIL_COMPILE_WORKERS workers (None when that is 0).
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import queue
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from coil.knobs import knobs
from coil.runtime.compile_jobs import CompileJob


class _Worker:
    """One worker process and its line protocol; `call` is serialised by `lock`."""

    def __init__(self) -> None:
        env = {**knobs.environ(), "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "coil.runtime.compile_worker"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, env=env, text=True, bufsize=1,
        )
        self.lock = threading.Lock()
        self.alive: bool | None = None  # None until its "ready" line is read

    def _read(self) -> dict[str, Any] | None:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            return None
        try:
            got = json.loads(line)
        except ValueError:
            return None
        return got if isinstance(got, dict) else None

    def call(self, request: dict[str, Any]) -> dict[str, Any] | None:
        """The worker's reply to `request`, or None when the worker is (now) dead."""
        with self.lock:
            if self.alive is None:
                self.alive = (self._read() or {}).get("ready") is True
            if not self.alive:
                return None
            assert self.proc.stdin is not None
            try:
                self.proc.stdin.write(json.dumps(request) + "\n")
                self.proc.stdin.flush()
            except (OSError, ValueError):  # a broken pipe, or closed by `close`
                self.alive = False
                return None
            reply = self._read()
            if reply is None:
                self.alive = False
            return reply

    def close(self) -> None:
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            self.proc.wait(timeout=2)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()


def _report(done: queue.SimpleQueue[tuple[int, str | None]], index: int, error: str | None) -> None:
    done.put((index, error))


class _Slot:
    """One distinct job: its request, and its outcome once a worker answered."""

    def __init__(self, key: str, request: dict[str, Any]) -> None:
        self.key = key  # the request as canonical JSON: what makes two jobs equal
        self.request = request
        self.done = False
        self.error: str | None = None
        self.waiters: list[Callable[[str | None], None]] = []


class CompilePool:
    """`size` worker processes (see the module docstring)."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"a CompilePool needs at least one worker, got {size}")
        self.size = size
        self._workers: list[_Worker] = []
        self._queue: queue.SimpleQueue[_Slot | None] = queue.SimpleQueue()
        self._slots: dict[str, _Slot] = {}
        self._lock = threading.Lock()

    def start(self) -> None:
        """Start the workers (returns at once; they import Triton in the background)."""
        with self._lock:
            if self._workers:
                return
            self._workers = [_Worker() for _ in range(self.size)]
            for w in self._workers:
                threading.Thread(target=self._serve, args=(w,), daemon=True, name="coil-compile-pool").start()

    def live_workers(self) -> int:
        """Workers not known to be dead."""
        with self._lock:
            return sum(w.alive is not False for w in self._workers)

    def _serve(self, worker: _Worker) -> None:
        while (slot := self._queue.get()) is not None:
            reply = worker.call(slot.request)
            if reply is None:
                self._finish(slot, "the compile worker exited")
                return
            self._finish(slot, None if reply.get("ok") is True else str(reply.get("error", "unknown error")))

    def _finish(self, slot: _Slot, error: str | None) -> None:
        with self._lock:
            slot.done, slot.error = True, error
            waiters, slot.waiters = slot.waiters, []
            if error is not None and self._slots.get(slot.key) is slot:  # a later run tries it again
                del self._slots[slot.key]
        for wake in waiters:
            wake(error)

    def run(self, jobs: Sequence[CompileJob]) -> Iterator[tuple[int, str | None]]:
        """Queue `jobs` for the workers (at once, before returning) and return an iterator of
        `(index, error or None)`, one per job as it finishes. A job equal to one queued or done
        earlier (by any caller) is not compiled again: it finishes when that one does. Nobody
        has to iterate: the workers compile regardless (`prefetch`)."""
        self.start()
        done: queue.SimpleQueue[tuple[int, str | None]] = queue.SimpleQueue()
        for i, job in enumerate(jobs):
            request = job.to_json()
            key = json.dumps(request, sort_keys=True)
            with self._lock:
                slot = self._slots.get(key)
                fresh = slot is None
                if slot is None:
                    slot = self._slots[key] = _Slot(key, request)
                finished = slot.done
                if not finished:
                    slot.waiters.append(functools.partial(_report, done, i))
            if finished:
                done.put((i, slot.error))
            elif fresh:
                self._queue.put(slot)
        return self._results(len(jobs), done)

    def _results(self, n: int, done: queue.SimpleQueue[tuple[int, str | None]]) -> Iterator[tuple[int, str | None]]:
        left = set(range(n))
        while left:
            try:
                i, error = done.get(timeout=0.2)
            except queue.Empty:
                if self.live_workers() > 0 or not done.empty():
                    continue
                break  # every worker is gone with jobs left
            left.discard(i)
            yield i, error
        for i in sorted(left):
            yield i, "no compile worker is left"

    def close(self) -> None:
        """End the workers (idempotent)."""
        with self._lock:
            workers, self._workers = self._workers, []
        for _ in workers:
            self._queue.put(None)
        for w in workers:
            w.close()


_shared: list[CompilePool] = []
_shared_lock = threading.Lock()


def shared_pool() -> CompilePool | None:
    """This process's pool, or None while COIL_COMPILE_WORKERS is 0 (read on every call; the
    pool is created, not started, on the first call that wants one, with that many workers)."""
    size = knobs.compile_workers
    if size == 0:
        return None
    with _shared_lock:
        if not _shared:
            pool = CompilePool(size)
            atexit.register(pool.close)
            _shared.append(pool)
        return _shared[0]


def prestart_compile_workers() -> None:
    """Start the shared pool's worker processes now, in the background, so that they have
    imported Triton when the first kernels are ready (no-op when COIL_COMPILE_WORKERS=0)."""
    pool = shared_pool()
    if pool is not None:
        pool.start()
