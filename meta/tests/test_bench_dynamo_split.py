"""`coil bench`'s warm-start report splits Dynamo's frame compiles into its own tracing and the
backend call (model_runs.dynamo_report), so each bench run shows how much of a warm start is
Dynamo's."""

from __future__ import annotations

import time

import pytest
import torch
from coil.bench.model_runs import dynamo_report
from coil.bench.report import _dynamo_split, targets


def test_a_real_compile_is_split_into_tracing_and_the_backend_within_its_wall_time() -> None:
    from torch._dynamo.utils import compilation_time_metrics

    torch._dynamo.reset()
    compilation_time_metrics.clear()
    assert "trace_s" not in dynamo_report()  # nothing compiled: no split to give

    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x * 2 + 1).sum(0)

    x = torch.randn(8, 4)
    t0 = time.perf_counter()
    got = torch.compile(f, backend="coil")(x)
    wall = time.perf_counter() - t0
    torch.testing.assert_close(got, f(x))
    report = dynamo_report()
    assert report["traced"] >= 1
    assert report["trace_s"] > 0 and report["backend_s"] > 0, report
    assert report["trace_s"] + report["backend_s"] <= wall + 1e-3, (report, wall)


def test_the_report_line_gives_each_modes_split() -> None:
    def model(trace: float | None) -> dict[str, object]:
        warm = {"traced": 1, "cache": {}} | ({"trace_s": trace, "backend_s": 0.4} if trace is not None else {})
        return {"kind": "model", "ms": 1.0, "accuracy_ok": True, "first_call_s": 10.0,
                "warm_first_call_s": 3.0, "warm_first_call_runs_s": [3.0], "dynamo_warm": warm}

    lines = targets({"cases": {"gpt2_infer_bf16": {"kind": "model", "eager": {"ms": 9.0},
                                                   "inductor": model(None), "coil": model(2.314)}}})
    line = next(x for x in lines if x.startswith("Dynamo in the (first) warm-start process"))
    assert "gpt2_infer_bf16 coil traced 1, Dynamo 2.31 s + backend 0.40 s" in line
    assert "gpt2_infer_bf16 inductor traced 1; " in line  # no split figures: no split shown


@pytest.mark.parametrize("report", [{}, {"trace_s": 1.0}, {"trace_s": "x", "backend_s": 1.0}])
def test_no_split_is_shown_without_both_figures(report: dict[str, object]) -> None:
    assert _dynamo_split(report) == ""
