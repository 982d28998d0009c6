"""The fixed CI slice of the graph fuzzer: 25 derandomized programs, coil against eager."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings

from .harness import check
from .programs import Program, programs


@settings(
    max_examples=25,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
)
@given(programs())
def test_fuzz_slice(prog: Program) -> None:
    check(prog)
