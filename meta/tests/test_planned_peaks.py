"""Planned against measured peaks (CPU): the measuring switch and its wiring into a compiled
graph's callable (against a scripted stand-in for the CUDA allocator's statistics), and
coil bench's per-graph comparison and its report, from GraphStats with figures given by hand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import coil.backend as cb
import pytest
import torch
from coil.backend import GraphStats
from coil.backend.debug import peaks
from coil.backend.pipeline.compile import _boxed
from coil.bench import planned_peaks
from coil.bench.report import render, targets

MIB = 2**20


class FakeAllocator:
    """torch.cuda's allocated and peak-allocated statistics, moved by hand; counts the calls."""

    def __init__(self, allocated: int) -> None:
        self.allocated = self.peak = allocated
        self.capturing = False
        self.calls = 0

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        def now(device: object = None) -> int:
            self.calls += 1
            return self.allocated

        def peak(device: object = None) -> int:
            self.calls += 1
            return self.peak

        def reset(device: object = None) -> None:
            self.calls += 1
            self.peak = self.allocated

        monkeypatch.setattr(torch.cuda, "memory_allocated", now)
        monkeypatch.setattr(torch.cuda, "max_memory_allocated", peak)
        monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", reset)
        monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: self.capturing)

    def graph(self, rise: int, keep: int) -> Any:
        """A graph's callable that allocates `rise` bytes at its peak and keeps `keep` (its outputs)."""
        def run(args: list[Any]) -> str:
            self.allocated += rise
            self.peak = max(self.peak, self.allocated)
            self.allocated -= rise - keep
            return "out"
        return run


@pytest.fixture
def switch() -> Any:
    yield peaks.measure_peaks
    peaks.measure_peaks(False)


def test_measured_call_keeps_the_largest_of_the_first_calls(monkeypatch: pytest.MonkeyPatch, switch: Any) -> None:
    alloc = FakeAllocator(1000)
    alloc.install(monkeypatch)
    stats = GraphStats("g")
    dev = torch.device("cuda", 0)
    assert peaks.measured_call(alloc.graph(300, 100), [], stats, dev) == "out"
    assert (stats.measured_peak, stats.measured_calls) == (300, 1)  # 1300 at the peak, 1000 before
    peaks.measured_call(alloc.graph(500, 0), [], stats, dev)  # held before: 1100; peak 1600
    peaks.measured_call(alloc.graph(100, 0), [], stats, dev)
    assert (stats.measured_peak, stats.measured_calls) == (500, 3)
    assert peaks.MEASURED_CALLS == 3
    peaks.measured_call(alloc.graph(9000, 0), [], stats, dev)  # past the first calls: not measured
    assert (stats.measured_peak, stats.measured_calls) == (500, 3)


def test_no_measurement_while_the_stream_is_captured(monkeypatch: pytest.MonkeyPatch) -> None:
    alloc = FakeAllocator(0)
    alloc.install(monkeypatch)
    alloc.capturing = True
    stats = GraphStats("g")
    peaks.measured_call(alloc.graph(64, 0), [], stats, torch.device("cuda", 0))
    assert (stats.measured_peak, stats.measured_calls) == (None, 0)


def test_the_boxed_callable_measures_only_with_the_switch_on(monkeypatch: pytest.MonkeyPatch, switch: Any) -> None:
    alloc = FakeAllocator(0)
    alloc.install(monkeypatch)
    stats = GraphStats("g")
    call = _boxed(alloc.graph(256, 32), None, (stats, torch.device("cuda", 0)))
    assert call([]) == "out"
    assert (stats.measured_peak, alloc.calls) == (None, 0)  # off: not one allocator statistic read
    switch(True)
    call([])
    assert (stats.measured_peak, stats.measured_calls) == (256, 1)
    read = alloc.calls
    _boxed(alloc.graph(256, 32))([])  # a CPU or CUDA-graphed graph: nothing measured, switch on or not
    assert alloc.calls == read


def test_a_cpu_graph_records_no_peak_and_its_planned_inputs_also_from_the_cache(
        switch: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def f(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.relu(x @ w) * 2
        return h.sum(1) + x.sum(1), h.amax(0)

    monkeypatch.setenv("COIL_CACHE_DIR", str(tmp_path))
    x, w = torch.randn(8, 16), torch.randn(16, 16)
    for served in ("off", "hit"):  # compiled, then loaded from the caches, as in the bench's own process
        torch._dynamo.reset()
        cb.reset()
        switch(True)
        got = torch.compile(f, backend="coil")(x, w)
        switch(False)
        for a, b in zip(got, f(x, w), strict=True):
            torch.testing.assert_close(a, b)
        (s,) = cb.COMPILED
        assert served == "off" or s.graph_cache == "hit", (s.graph_cache, s.aot_cache, s.frontend_cache)
        assert (s.measured_peak, s.measured_calls) == (None, 0)  # Triton's interpreter: no allocator
        assert s.planned_peak is not None and s.planned_inputs == x.nbytes + w.nbytes
        assert s.planned_growth == s.planned_peak[1] - s.planned_inputs >= 8 * 4 + 16 * 4  # its outputs at least
        step_bytes, inputs = s.planned_profile  # the order in detail, also from the cache
        assert max(step_bytes) + s.planned_inputs == s.planned_peak[1]
        assert sorted((k, n) for k, n, _ in inputs) == [(0, x.nbytes), (1, w.nbytes)]


def _stats() -> list[GraphStats]:
    """Graphs with figures given by hand (MiB unless said): each kind of row."""
    def g(name: str, peak: int | None, inputs: int | None, measured: int | None, **kw: Any) -> GraphStats:
        return GraphStats(name, planned_peak=None if peak is None else (peak + 7, peak), planned_inputs=inputs,
                          measured_peak=measured, **kw)

    return [
        g("forward_0", 300 * MIB, 200 * MIB, 103 * MIB),       # planned 100, measured 103: 1.03, within
        g("backward_1", 90 * MIB, 10 * MIB, 100 * MIB),        # planned 80, measured 100: 1.25, not within
        g("inference_2", 2100, 100, 2100),                     # planned 2000 B, 5 % over: not within
        g("inference_3", 2100, 1, 2099),                       # planned 2099 B, measured the same: within
        g("inference_4", 2000, 0, 1901),                       # 4.95 % under: within
        g("inference_5", None, None, 4096),                    # no planned peak
        g("inference_6", 50 * MIB, 0, None),                   # never measured
        g("forward_7", None, None, None, eager_fallback="boom"),
    ]


def test_graph_rows_against_ratios_by_hand() -> None:
    rows = planned_peaks.graph_rows(_stats())
    by = {r["graph"]: r for r in rows}
    assert [r["graph"] for r in rows] == [s.name for s in _stats()]
    f = by["forward_0"]
    assert (f["planned_mib"], f["measured_mib"], f["inputs_mib"]) == (100.0, 103.0, 200.0)
    assert f["ratio"] == pytest.approx(1.03) and f["within"] is True
    assert by["backward_1"]["ratio"] == pytest.approx(1.25) and by["backward_1"]["within"] is False
    assert by["inference_2"]["ratio"] == pytest.approx(1.05) and by["inference_2"]["within"] is False
    assert by["inference_3"]["ratio"] == 1.0 and by["inference_3"]["within"] is True
    assert by["inference_4"]["ratio"] == pytest.approx(0.9505) and by["inference_4"]["within"] is True
    assert by["inference_5"]["within"] is None and "no planned peak" in by["inference_5"]["missing"]
    assert by["inference_6"]["within"] is None and "not measured" in by["inference_6"]["missing"]
    assert "eagerly" in by["forward_7"]["missing"]
    rep = planned_peaks.report(_stats())
    assert (rep["compared"], rep["within"], rep["tolerance"]) == (5, 3, 0.05)


def test_a_zero_planned_growth() -> None:
    rows = planned_peaks.graph_rows([GraphStats("a", planned_peak=(9, 8), planned_inputs=8, measured_peak=0),
                                     GraphStats("b", planned_peak=(9, 8), planned_inputs=8, measured_peak=512)])
    assert [(r["ratio"], r["within"]) for r in rows] == [(1.0, True), (None, False)]


def _report() -> dict[str, Any]:
    row = {"ms": 2.0, "loop_ms": 2.1, "accuracy_ok": True, "peak_check": planned_peaks.report(_stats()[:2])}
    other = {"ms": 1.0, "loop_ms": 1.1, "accuracy_ok": True,
             "peak_check": planned_peaks.report([GraphStats("inference_0", planned_peak=(64 * MIB, 64 * MIB),
                                                            planned_inputs=32 * MIB, measured_peak=32 * MIB)])}
    return {"date": "d", "gpu": "g", "torch": "t", "triton": "tr", "modes": ["eager", "coil_nocg"],
            "cases": {"gpt2_train_amp": {"kind": "model", "eager": {"ms": 3.0}, "coil_nocg": row},
                      "resnet50_infer_bf16": {"kind": "model", "eager": {"ms": 1.5}, "coil_nocg": other},
                      "add_fp32": {"kind": "micro", "eager": {"ms": 0.1}}}}


def test_the_report_table_and_the_targets_line() -> None:
    md = render(_report())
    assert "Planned vs measured peak (coil_nocg)" in md
    assert "| gpt2_train_amp | forward_0 | 100.00 | 103.00 | 1.030 | 200.00 |" in md
    assert "| gpt2_train_amp | backward_1 | 80.00 | 100.00 | 1.250 | 10.00 |" in md
    assert "| resnet50_infer_bf16 | inference_0 | 32.00 | 32.00 | 1.000 | 32.00 |" in md
    line = "coil_nocg graphs whose measured peak is within 5 % of the planned peak: 2 of 3 " \
           "(gpt2_train_amp 1/2; resnet50_infer_bf16 1/1)"
    assert line in targets(_report())
    assert f"- {line}" in md


def test_a_missing_figure_is_shown_with_its_reason_and_no_check_no_section() -> None:
    rep = _report()
    rep["cases"]["gpt2_train_amp"]["coil_nocg"]["peak_check"] = planned_peaks.report(_stats()[5:6])
    assert "| gpt2_train_amp | inference_5 | — | 0.00 | no planned peak" in render(rep)
    for case in rep["cases"].values():
        case.get("coil_nocg", {}).pop("peak_check", None)
    assert "Planned vs measured" not in render(rep)
    assert not any("within 5 %" in t for t in targets(rep))


def test_check_switches_measuring_on_for_its_calls_only() -> None:
    seen: list[bool] = []
    rep = planned_peaks.check(lambda: seen.append(peaks.ON), calls=2)
    assert seen == [True, True] and peaks.ON is False
    assert rep["graphs"] == planned_peaks.graph_rows(cb.COMPILED)

    def fails() -> None:
        raise RuntimeError("out of memory")

    with pytest.raises(RuntimeError):
        planned_peaks.check(fails)
    assert peaks.ON is False


def test_planned_growth_of_a_call_against_every_step_by_hand() -> None:
    import random

    rng = random.Random(3)
    for _ in range(200):
        n = rng.randint(1, 8)
        step_bytes = [rng.randint(0, 100) for _ in range(n)]
        inputs = [(k, rng.randint(1, 50), rng.randint(0, n - 1)) for k in range(rng.randint(0, 4))]
        released = {k for k, _, _ in inputs if rng.random() < 0.5}
        want = max([0] + [live - sum(b for k, b, last in inputs if k in released and last < t)
                          for t, live in enumerate(step_bytes)])
        assert peaks.planned_growth_of((step_bytes, inputs), released) == want
    # nothing released: the written bytes' own peak; an input read first only frees later steps
    assert peaks.planned_growth_of(([5, 9, 4], [(0, 3, 0)]), set()) == 9
    assert peaks.planned_growth_of(([5, 9, 4], [(0, 3, 0)]), {0}) == 6


def test_released_inputs_are_those_the_argument_list_alone_holds() -> None:
    kept = torch.randn(4)
    base = torch.randn(8)
    args: list[Any] = [torch.randn(4), kept, base[:4], torch.randn(3), 7]
    alias = args[3].view(3)  # another tensor over the same storage
    assert peaks.released_inputs(args, [0, 1, 2, 3, 4]) == {0}
    del alias
    assert peaks.released_inputs(args, [0, 3]) == {0, 3}


def test_a_measured_call_is_planned_with_the_inputs_it_releases(monkeypatch: pytest.MonkeyPatch,
                                                                switch: Any) -> None:
    alloc = FakeAllocator(1000)
    alloc.install(monkeypatch)
    # steps write 40, 90, 60 bytes live; input 0 (20 B) is last read at step 0, input 1 (30 B) at step 2
    stats = GraphStats("g", planned_profile=([40, 90, 60], [(0, 20, 0), (1, 30, 2)]))
    held = torch.zeros(1)
    peaks.measured_call(alloc.graph(70, 0), [torch.zeros(5), held], stats, torch.device("cuda", 0))
    assert (stats.measured_peak, stats.measured_planned, stats.measured_released) == (70, 70, 20)
    rows = planned_peaks.graph_rows([stats])
    assert rows[0]["planned_bytes"] == 70 and rows[0]["within"] and rows[0]["released_bytes"] == 20
