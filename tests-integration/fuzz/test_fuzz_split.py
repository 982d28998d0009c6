"""The graph fuzzer's split mode in CI: derandomized programs with a long dim, compiled with
coil's split-reduction threshold lowered (fuzz/programs.py), coil against eager. Small shapes at
the default threshold never reach coil's split reductions (partials, then their reduction)."""

from __future__ import annotations

import coil.lowering_ir.ops.reductions as reductions
import pytest
from hypothesis import HealthCheck, given, settings

from .harness import check
from .programs import Program, programs


def test_fuzz_split_slice(monkeypatch: pytest.MonkeyPatch) -> None:
    plans: list[object] = []
    original = reductions._split_plan

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        plan = original(*args, **kwargs)
        if plan is not None:
            plans.append(plan)
        return plan

    monkeypatch.setattr(reductions, "_split_plan", counted)

    @settings(max_examples=24, derandomize=True, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large])
    @given(programs(split=True))
    def run(prog: Program) -> None:
        check(prog)

    run()
    print("split plans:", len(plans))
    assert plans, "no program of the split slice split a reduction: the slice no longer tests what it is for"
