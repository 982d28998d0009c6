"""Lanes of one machine (coil.bench.lanes): a lane's timing never overlaps another lane's work or
timing, working lanes run side by side, a lane waiting to time is not overtaken by lanes that
start working after it began to wait, and one whose wait runs out times beside the work and
says so. Each lane is a thread with its own descriptors
(`flock` locks belong to open file descriptions, so threads contend as processes do); the
oracle is the intervals each lane records."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from coil.bench import lanes

Interval = tuple[float, float]


def _run(kind: str, path: str | None, seconds: float, out: dict[str, Interval], name: str,
         waiting: threading.Event | None = None, wait_s: float = 30.0) -> None:
    hold = lanes.working(path) if kind == "work" else lanes.timing_alone(path, wait_s)
    if waiting is not None:
        waiting.set()
    with hold as taken:
        start = time.monotonic()
        time.sleep(seconds)
        out[name] = (start, time.monotonic())
        out[name + " taken"] = (float(taken), 0.0)


def _overlap(a: Interval, b: Interval) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def _lane(*args: object) -> threading.Thread:
    t = threading.Thread(target=_run, args=args)
    t.start()
    return t


def test_timing_waits_for_work_and_work_runs_side_by_side(tmp_path: Path) -> None:
    lock = str(tmp_path / "lock")
    got: dict[str, Interval] = {}
    w1 = _lane("work", lock, 0.4, got, "w1")
    w2 = _lane("work", lock, 0.4, got, "w2")
    time.sleep(0.1)
    t = _lane("time", lock, 0.2, got, "t")
    for th in (w1, w2, t):
        th.join()
    assert _overlap(got["w1"], got["w2"]), "working lanes did not run side by side"
    assert not _overlap(got["t"], got["w1"]) and not _overlap(got["t"], got["w2"])
    assert got["t"][0] >= max(got["w1"][1], got["w2"][1])


def test_two_timings_take_turns(tmp_path: Path) -> None:
    lock = str(tmp_path / "lock")
    got: dict[str, Interval] = {}
    a = _lane("time", lock, 0.2, got, "a")
    b = _lane("time", lock, 0.2, got, "b")
    a.join()
    b.join()
    assert not _overlap(got["a"], got["b"])


def test_work_started_after_a_timing_lane_waits_queues_behind_it(tmp_path: Path) -> None:
    lock = str(tmp_path / "lock")
    got: dict[str, Interval] = {}
    w1 = _lane("work", lock, 0.5, got, "w1")
    time.sleep(0.1)
    waiting = threading.Event()
    t = _lane("time", lock, 0.2, got, "t", waiting)
    waiting.wait()
    time.sleep(0.1)  # the timing lane now waits for w1
    w2 = _lane("work", lock, 0.2, got, "w2")
    for th in (w1, t, w2):
        th.join()
    assert got["t"][0] >= got["w1"][1]
    assert got["w2"][0] >= got["t"][1], "a lane that began working later overtook the waiting timing lane"


def test_a_timing_lane_that_waited_too_long_times_beside_the_work_and_says_so(tmp_path: Path) -> None:
    lock = str(tmp_path / "lock")
    got: dict[str, Interval] = {}
    w = _lane("work", lock, 1.0, got, "w")
    time.sleep(0.1)
    t = _lane("time", lock, 0.1, got, "t", None, 0.3)
    t.join()
    w.join()
    assert got["t taken"][0] == 0.0, "the lock was taken although the other lane still worked"
    assert _overlap(got["t"], got["w"]), "it waited for the work to end instead of timing beside it"
    with lanes.timing_alone(lock, 1.0) as taken:  # nothing left held
        assert taken


def test_one_lane_holds_nothing(tmp_path: Path) -> None:
    got: dict[str, Interval] = {}
    a = _lane("time", None, 0.2, got, "a")
    b = _lane("work", None, 0.2, got, "b")
    a.join()
    b.join()
    assert _overlap(got["a"], got["b"])
    assert list(tmp_path.iterdir()) == []
