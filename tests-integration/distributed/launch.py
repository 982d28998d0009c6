"""Start one scenario of ranks.py in WORLD processes over gloo, wait for them, and hand back each
rank's results.

Every rank is a fresh Python process (`ranks.py <scenario> <rank> <world> <store> <out>`) in its
own process session, with TRITON_INTERPRET=1, LOCAL_WORLD_SIZE=WORLD (coil shares the CPUs among
the ranks) and caches of its own (coil's and torch's AOTAutograd cache: each rank compiles
through the whole pipeline, no rank loads what another stored). The ranks meet through a
FileStore in the test's temporary folder: no port to race for.

Nothing outlives the call: when a rank fails, the others are killed (a rank waiting in a
collective for a dead peer would otherwise sit out gloo's timeout), and at the deadline every
rank is killed with everything it started (its whole session).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from coil.knobs import knobs

HERE = Path(__file__).parent
WORLD = 2
# one scenario takes 25-40 s on two cores; the deadline only guards against a hang
DEADLINE_S = 300.0
# a rank still running this long before the deadline prints its threads' stacks and exits
DUMP_BEFORE_S = 20.0
# after one rank failed, how long the others get to exit on their own (with their own error)
GRACE_S = 5.0


@dataclass
class Rank:
    """One running rank: its process and where its output goes."""

    rank: int
    proc: subprocess.Popen[bytes]
    log: Path
    out: Path

    def tail(self, chars: int = 4000) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return f"--- rank {self.rank} (exit {self.proc.returncode}) ---\n{text[-chars:]}"


def _kill(ranks: list[Rank]) -> None:
    """Kill every rank still running, with the processes it started (its session)."""
    for r in ranks:
        if r.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(r.proc.pid, signal.SIGKILL)
    for r in ranks:
        r.proc.wait()


def environment(folder: Path) -> dict[str, str]:
    """A rank's environment: the interpreter, WORLD ranks on this machine, coil's and torch's
    caches under `folder` (made)."""
    folder.mkdir(parents=True, exist_ok=True)
    return knobs.environ(triton_interpret=True, local_world_size=WORLD, cache_dir=str(folder / "coil-cache"),
                         inductor_cache_dir=str(folder / "inductor-cache"))


def _start(scenario: str, tmp: Path, rank: int, deadline_s: float) -> Rank:
    folder = tmp / f"rank{rank}"
    env = environment(folder)
    log, out = folder / "log.txt", folder / "result.pt"
    cmd = [sys.executable, str(HERE / "ranks.py"), scenario, str(rank), str(WORLD), str(tmp / "store"), str(out),
           str(max(deadline_s - DUMP_BEFORE_S, 1.0))]
    with log.open("wb") as f:
        proc = subprocess.Popen(cmd, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
    return Rank(rank, proc, log, out)


def run(scenario: str, tmp: Path, deadline_s: float = DEADLINE_S) -> list[dict[str, Any]]:
    """Run `scenario` (a name in ranks.SCENARIOS) on WORLD ranks; each rank's result dict, by rank.

    Raises AssertionError with every rank's output when a rank exits with an error or the
    deadline passes; no rank is left running either way.
    """
    ranks = [_start(scenario, tmp, r, deadline_s) for r in range(WORLD)]
    try:
        end = time.monotonic() + deadline_s
        failed_at: float | None = None
        while any(r.proc.poll() is None for r in ranks):
            now = time.monotonic()
            if failed_at is None and any(r.proc.returncode not in (None, 0) for r in ranks):
                failed_at = now
            if now > end or (failed_at is not None and now > failed_at + GRACE_S):
                break
            time.sleep(0.2)
        timed_out = any(r.proc.poll() is None for r in ranks) and failed_at is None
    finally:
        _kill(ranks)
    logs = "\n".join(r.tail() for r in ranks)
    assert not timed_out, f"{scenario}: ranks still running after {deadline_s:.0f} s, killed\n{logs}"
    assert all(r.proc.returncode == 0 for r in ranks), f"{scenario}: a rank failed\n{logs}"
    return [torch.load(r.out, weights_only=True) for r in ranks]
