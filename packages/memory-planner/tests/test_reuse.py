"""plan_reuse against the contract (docs/contracts.md) and an independent step-by-step oracle."""

from __future__ import annotations

import pytest
from coil.memory_planner import BufferLifetime, ReusePlan, check_reuse_plan, plan_reuse
from hypothesis import given, settings
from hypothesis import strategies as st


def naive_peaks(buffers: list[BufferLifetime], storage: dict[str, str]) -> tuple[int, int]:
    """Peak without and with the plan, by scanning every step (no shared code with the planner)."""
    horizon = max((b.end for b in buffers), default=0)
    by_name = {b.name: b for b in buffers}

    def root(n: str) -> str:
        while storage[n] != n:
            n = storage[n]
        return n

    groups: dict[str, list[BufferLifetime]] = {}
    for b in buffers:
        groups.setdefault(root(b.name), []).append(b)
    unplanned = planned = 0
    for t in range(horizon + 1):
        unplanned = max(unplanned, sum(b.size for b in buffers if b.start <= t <= b.end))
        planned = max(
            planned,
            sum(
                by_name[r].size
                for r, members in groups.items()
                if min(m.start for m in members) <= t <= max(m.end for m in members)
            ),
        )
    return unplanned, planned


def test_simple_chain_reuses() -> None:
    bufs = [
        BufferLifetime("a", 64, 0, 1, "cuda"),
        BufferLifetime("b", 64, 2, 3, "cuda"),
        BufferLifetime("c", 64, 4, 5, "cuda"),
    ]
    plan = plan_reuse(bufs)
    assert plan.storage == {"a": "a", "b": "a", "c": "b"}
    assert plan.peak_bytes == plan.unplanned_peak_bytes == 64


def test_no_reuse_while_live_or_across_pool_or_size() -> None:
    bufs = [
        BufferLifetime("a", 64, 0, 2, "cuda"),
        BufferLifetime("b", 64, 2, 3, "cuda"),  # a.end == b.start: both live at step 2
        BufferLifetime("c", 32, 4, 5, "cuda"),  # other size
        BufferLifetime("d", 64, 4, 5, "cpu"),  # other pool
    ]
    plan = plan_reuse(bufs)
    assert plan.storage["b"] == "b"
    assert plan.storage["c"] == "c"
    assert plan.storage["d"] == "d"


def test_reuse_refused_when_gap_raises_peak() -> None:
    # a dies at 0, b is born at 3; holding a's storage across 1..2 would add 100 on top of the
    # big buffer that makes the peak at step 1.
    bufs = [
        BufferLifetime("a", 100, 0, 0, "p"),
        BufferLifetime("big", 1000, 1, 2, "p"),
        BufferLifetime("b", 100, 3, 3, "p"),
    ]
    plan = plan_reuse(bufs)
    assert plan.storage["b"] == "b"
    assert plan.peak_bytes == 1000


def test_duplicate_names_rejected() -> None:
    with pytest.raises(ValueError, match="unique"):
        plan_reuse([BufferLifetime("a", 1, 0, 0, "p"), BufferLifetime("a", 1, 1, 1, "p")])


def test_bad_lifetime_rejected() -> None:
    with pytest.raises(ValueError, match="lifetime"):
        BufferLifetime("a", 1, 3, 2, "p")
    with pytest.raises(ValueError, match="negative"):
        BufferLifetime("a", -1, 0, 2, "p")


def test_empty() -> None:
    assert plan_reuse([]) == ReusePlan({}, 0, 0)


def test_checker_catches_bad_plans() -> None:
    bufs = [BufferLifetime("a", 8, 0, 1, "p"), BufferLifetime("b", 8, 1, 2, "p")]
    with pytest.raises(ValueError, match="while live"):
        check_reuse_plan(bufs, ReusePlan({"a": "a", "b": "a"}, 8, 16))


@st.composite
def lifetimes(draw: st.DrawFn) -> list[BufferLifetime]:
    n = draw(st.integers(0, 12))
    out = []
    for i in range(n):
        start = draw(st.integers(0, 10))
        end = draw(st.integers(start, 12))
        size = draw(st.sampled_from([0, 16, 32, 64]))
        pool = draw(st.sampled_from(["x", "y"]))
        out.append(BufferLifetime(f"b{i}", size, start, end, pool))
    return out


@settings(max_examples=300, deadline=None)
@given(lifetimes())
def test_random_plans_obey_contract(bufs: list[BufferLifetime]) -> None:
    plan = plan_reuse(bufs)
    check_reuse_plan(bufs, plan)
    unplanned, planned = naive_peaks(bufs, dict(plan.storage))
    assert plan.unplanned_peak_bytes == unplanned
    assert plan.peak_bytes == planned
    assert planned <= unplanned
    # one live buffer per storage: members of one storage never overlap in time
    holders = [v for k, v in plan.storage.items() if k != v]
    assert len(holders) == len(set(holders))
