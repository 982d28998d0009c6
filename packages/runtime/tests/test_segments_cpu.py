"""SegmentedRunner without capture, and storage liveness: the CPU-testable parts of CUDA-graph
segments (the capture itself is tested on a GPU, tests-integration/test_cuda_graph_segments.py)."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import pytest
import torch
from coil.runtime import CaptureSpec, ReplayPolicy, SegmentedRunner
from coil.runtime.liveness import StorageLiveness


def _plan(seen: dict[str, Any]) -> dict[str, Any]:
    """x -> a = x + 1 (seg 0) -> b = a.sum() host round trip (seg 1, eager) -> out = a * b (seg 2);
    `a` is made by segment 0 and read last by segment 2."""

    def seg0(args: list[Any]) -> tuple[Any, ...]:
        (x,) = args
        args.clear()
        return (x + 1,)

    def seg1(args: list[Any]) -> tuple[Any, ...]:
        (a,) = args
        args.clear()
        seen["a_alive_in_seg1"] = a is not None
        return (torch.tensor(a.sum().item()),)

    def seg2(args: list[Any]) -> tuple[Any, ...]:
        a, b = args
        args.clear()
        ref = weakref.ref(a)
        out = a * b
        del a
        gc.collect()
        seen["a_freed_by_last_reader"] = ref() is None  # nobody else (the driver) holds it
        return (out,)

    return {
        "inputs": ("x", None),
        "segments": [
            {"fn": seg0, "capture": True, "inputs": ("x",), "outputs": ("a",), "launches": 1, "why": None},
            {"fn": seg1, "capture": False, "inputs": ("a",), "outputs": ("b",), "launches": 1, "why": "sync"},
            {"fn": seg2, "capture": True, "inputs": ("a", "b"), "outputs": ("out",), "launches": 1, "why": None},
        ],
        "returns": (("ref", "out"), ("value", 7), ("ref", "b")),
    }


def test_segments_run_in_order_and_values_live_until_their_last_reader() -> None:
    seen: dict[str, Any] = {}
    report: list[str] = []
    run = SegmentedRunner(_plan(seen), capture=False, report=report)
    x = torch.randn(5)
    args: list[Any] = [x, "unused"]
    out, seven, b = run(args)
    assert args == []
    want_b = (x + 1).sum()
    torch.testing.assert_close(b, want_b)
    torch.testing.assert_close(out, (x + 1) * want_b)
    assert seven == 7
    assert seen == {"a_alive_in_seg1": True, "a_freed_by_last_reader": True}
    assert report == ["segment 0: eager (capture off)", "segment 1: eager (sync)", "segment 2: eager (capture off)"]
    assert run.captured_segments == 0
    out2, _, _ = run([x * 2, None])  # later calls: same path
    torch.testing.assert_close(out2, (2 * x + 1) * (2 * x + 1).sum())


def test_wrong_input_count_names_the_runner() -> None:
    run = SegmentedRunner(_plan({}), capture=False)
    with pytest.raises(ValueError, match="SegmentedRunner: expected 2 inputs, got 1"):
        run([torch.ones(1)])


def test_storage_liveness_sees_aliases_made_after_the_baseline() -> None:
    owned = torch.arange(6.0)
    other = torch.zeros(3)
    view_of_owned = owned[:2]  # made before the baseline: part of it
    live = StorageLiveness([owned, view_of_owned, 3, other])
    assert len(live) == 2 and live.live() == []
    alias = owned.detach()
    assert live.live() == [owned.untyped_storage()._cdata]
    del alias
    assert live.live() == []
    part = other[1:]
    assert live.live() == [other.untyped_storage()._cdata]
    del part
    same_object = owned  # the very tensor object adds no storage reference: not seen (documented)
    assert live.live() == []
    del same_object
    del view_of_owned  # below the baseline is not "live"
    assert live.live() == []


def test_storage_liveness_exclude() -> None:
    p, q = torch.ones(2), torch.ones(2)
    live = StorageLiveness([p, q], exclude=[p.untyped_storage()._cdata])
    keep = (p.detach(), q.detach())
    assert live.live() == [q.untyped_storage()._cdata]
    del keep


class _EmulatedGraph:
    """A CPU stand-in for CudaGraphRunner with its memory behaviour: static input buffers
    (borrowed ones used as given), static outputs at fixed addresses that every "replay"
    overwrites, raw static outputs returned (`clone_outputs=False`)."""

    made: list[_EmulatedGraph] = []  # noqa: RUF012

    def __init__(self, call: Any, example_inputs: Any, spec: CaptureSpec, policy: ReplayPolicy) -> None:
        assert policy.clone_outputs is False and spec.launches is not None
        self.call = call
        inputs = list(example_inputs)
        self.static = set(spec.static_input_indices or ())
        self.buffers = dict(policy.input_buffers or {})
        self.first_outputs: tuple[Any, ...] | None = tuple(call(list(inputs)))
        self._static_inputs = list(inputs)
        for i, x in enumerate(inputs):
            if isinstance(x, torch.Tensor) and i not in self.static:
                buf = self.buffers.get(i)
                if buf is None:
                    buf = x.clone()
                elif buf.data_ptr() != x.data_ptr():
                    buf.copy_(x)
                self._static_inputs[i] = buf
        self.graph_outputs = tuple(o.clone() for o in call(list(self._static_inputs)))
        self.graph: object | None = object()
        self.capture_error = None
        self.foreign_borrowed = 0
        _EmulatedGraph.made.append(self)

    def __call__(self, inputs: list[Any]) -> tuple[Any, ...]:
        for i, buf in self.buffers.items():
            self.foreign_borrowed += inputs[i].data_ptr() != buf.data_ptr()
        for i, x in enumerate(inputs):
            if isinstance(x, torch.Tensor) and i not in self.static and i not in self.buffers:
                self._static_inputs[i].copy_(x)
        inputs.clear()
        for dst, src in zip(self.graph_outputs, self.call(list(self._static_inputs)), strict=True):
            dst.copy_(src)
        return self.graph_outputs


def test_captured_segments_borrow_in_place_and_clone_what_they_return(monkeypatch: pytest.MonkeyPatch) -> None:
    import coil.runtime.segments as segments

    _EmulatedGraph.made = []
    monkeypatch.setattr(segments, "CudaGraphRunner", _EmulatedGraph)

    def seg0(args: list[Any]) -> tuple[Any, ...]:
        x, w = args
        args.clear()
        return (x * w + 1,)

    def seg1(args: list[Any]) -> tuple[Any, ...]:
        (a,) = args
        args.clear()
        return (torch.tensor(a.sum().item()),)

    def seg2(args: list[Any]) -> tuple[Any, ...]:
        a, b = args
        args.clear()
        return (a * b,)

    plan = {
        "inputs": ("x", "w"),
        "segments": [
            {"fn": seg0, "capture": True, "inputs": ("x", "w"), "outputs": ("a",), "launches": 1, "why": None},
            {"fn": seg1, "capture": False, "inputs": ("a",), "outputs": ("b",), "launches": 1, "why": "sync"},
            {"fn": seg2, "capture": True, "inputs": ("a", "b"), "outputs": ("out",), "launches": 1, "why": None},
        ],
        "returns": (("ref", "out"), ("ref", "a")),
    }
    report: list[str] = []
    run = SegmentedRunner(plan, capture=True, report=report)
    w = torch.nn.Parameter(torch.randn(4), requires_grad=False)

    def want(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a = x * w + 1
        return a * a.sum(), a

    xs = [torch.randn(4) for _ in range(4)]
    results = [run([x, w]) for x in xs]
    first, second = _EmulatedGraph.made
    assert first.static == {1}  # the parameter is used in place
    assert second.buffers == {0: first.graph_outputs[0]}  # `a` is read where segment 0 leaves it
    assert second.static == set() and 1 not in second.buffers  # `b` (eager) is copied
    assert second.foreign_borrowed == 0
    assert report == ["segment 0: captured (1 launches)", "segment 1: eager (sync)", "segment 2: captured (1 launches)"]
    assert run.captured_segments == 2
    for x, got in zip(xs, results, strict=True):  # earlier results survive later replays: clones
        for g, e in zip(got, want(x), strict=True):
            torch.testing.assert_close(g, e)
    static = {t.data_ptr() for r in _EmulatedGraph.made for t in r.graph_outputs}
    assert not any(t.data_ptr() in static for got in results for t in got)


def test_also_static_inputs_are_used_in_place(monkeypatch: pytest.MonkeyPatch) -> None:
    """A module buffer the graph updates in place (batch norm's running mean), listed in
    `also_static`, is a static input of the segment's graph (the caller's tensor itself, so each
    replay updates it there); without it the buffer is copied into the graph's own."""
    import coil.runtime.segments as segments

    monkeypatch.setattr(segments, "CudaGraphRunner", _EmulatedGraph)

    def seg0(args: list[Any]) -> tuple[Any, ...]:
        x, w, running = args
        args.clear()
        running.mul_(0.9).add_(0.1 * x)
        return (x * w,)

    def seg1(args: list[Any]) -> tuple[Any, ...]:
        (a,) = args
        args.clear()
        return (a + 1,)

    plan = {
        "inputs": ("x", "w", "running"),
        "segments": [
            {"fn": seg0, "capture": True, "inputs": ("x", "w", "running"), "outputs": ("a",), "launches": 2,
             "why": None},
            {"fn": seg1, "capture": False, "inputs": ("a",), "outputs": ("out",), "launches": 1, "why": "sync"},
        ],
        "returns": (("ref", "out"),),
    }
    w = torch.nn.Parameter(torch.randn(4), requires_grad=False)
    for also, static in (([2], {1, 2}), ([], {1})):
        _EmulatedGraph.made = []
        run = SegmentedRunner(plan, capture=True, also_static=also)
        running = torch.zeros(4)
        for _ in range(3):
            x = torch.randn(4)
            (got,) = run([x, w, running])
            torch.testing.assert_close(got, x * w + 1)
        (graph,) = _EmulatedGraph.made
        assert graph.static == static
        assert (graph._static_inputs[2] is running) == bool(also)
