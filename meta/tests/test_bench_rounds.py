"""coil.bench.rounds: interleaved timing rounds and the round-by-round comparison, and how
`coil bench` reports a micro case behind Inductor."""

from __future__ import annotations

import itertools

import pytest
from coil.bench.report import targets
from coil.bench.rounds import interleaved, paired


def test_every_call_is_timed_once_a_round_in_rotating_order() -> None:
    order: list[str] = []
    calls = {n: (lambda n=n: order.append(n)) for n in ("eager", "inductor", "coil")}
    clock = itertools.count(1)

    def time_one(call: object) -> float:
        call()  # type: ignore[operator]
        return float(next(clock))

    times = interleaved(calls, 4, time_one)
    assert order == ["eager", "inductor", "coil", "inductor", "coil", "eager",
                     "coil", "eager", "inductor", "eager", "inductor", "coil"]
    # each name's times are the clock ticks at which it ran, in round order
    assert times == {n: [float(i + 1) for i, m in enumerate(order) if m == n] for n in calls}
    # over three rounds each call has run first, second and third once
    positions = {n: sorted(order[3 * r: 3 * r + 3].index(n) for r in range(3)) for n in calls}
    assert all(p == [0, 1, 2] for p in positions.values())


def test_rounds_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        interleaved({"a": lambda: None}, 0, lambda c: 0.0)


def test_paired_compares_round_by_round() -> None:
    coil = [1.00, 1.02, 0.99, 1.01, 1.00]
    ind = [1.01, 1.00, 1.00, 1.00, 1.00]
    p = paired(coil, ind)
    assert p["ratios"] == pytest.approx([c / i for c, i in zip(coil, ind, strict=True)])
    assert p["median_ratio"] == pytest.approx(sorted(c / i for c, i in zip(coil, ind, strict=True))[2])
    assert p["a_not_slower"] == 3 and p["rounds"] == 5
    with pytest.raises(ValueError, match="same, non-zero"):
        paired([1.0], [1.0, 2.0])


def _micro(coil: list[float], ind: list[float]) -> dict[str, object]:
    import statistics

    return {"kind": "micro", "coil_vs_inductor": paired(coil, ind),
            "coil": {"ms": statistics.median(coil), "pct_copy": 99.0, "accuracy_ok": True},
            "inductor": {"ms": statistics.median(ind), "accuracy_ok": True}}


def test_the_report_names_micro_cases_behind_with_their_rounds() -> None:
    report = {"cases": {"softmax_fp32": _micro([1.0, 1.0, 1.0], [1.1, 1.1, 1.1]),
                        "layernorm_bf16": _micro([1.01, 0.99, 1.02], [1.0, 1.0, 1.0])}}
    lines = targets(report)
    assert "coil >= Inductor on micro cases: 1/2 (met: softmax_fp32)" in lines
    behind = next(x for x in lines if x.startswith("micro cases behind"))
    assert "layernorm_bf16 1.010, not slower in 1/3 rounds" in behind
    assert "softmax_fp32" not in behind
