"""coil.backend's debugging helpers that need no compile: COIL_LOGS, the progress bar, checks."""

from __future__ import annotations

import sys
import types
from typing import Any

import coil.backend.pipeline.progress as progress
import pytest
import torch
from coil.backend import CoilCheckError
from coil.backend.debug.checks import LifetimeTracker, check_outputs
from coil.backend.debug.dump import Span
from coil.backend.debug.logs import ARTEFACTS, selected
from coil.knobs import knobs


def test_coil_logs_selection() -> None:
    with knobs.override(logs=" fusion, kernels "):
        assert selected() == {"fusion", "kernels"}
    with knobs.override(logs="all"):
        assert selected() == set(ARTEFACTS)
    with knobs.override(logs="fusion,bogus"), pytest.raises(ValueError, match="bogus"):
        selected()


class _Bar:
    def __init__(self, **kw: Any) -> None:
        self.kw = kw
        self.done = 0
        self.closed = False

    def update(self, n: int) -> None:
        self.done += n

    def close(self) -> None:
        self.closed = True


def test_progress_bar_only_on_a_tty_with_tqdm(monkeypatch: pytest.MonkeyPatch) -> None:
    bars: list[_Bar] = []

    def fake_tqdm(**kw: Any) -> _Bar:
        bars.append(_Bar(**kw))
        return bars[-1]

    monkeypatch.setitem(sys.modules, "tqdm", types.SimpleNamespace(tqdm=fake_tqdm))
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False, raising=False)
    assert progress.progress_bar(5, "g") is None
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    assert progress.progress_bar(1, "g") is None  # one kernel: no bar
    with knobs.override(progress=False):
        assert progress.progress_bar(5, "g") is None
    calls: list[int] = []
    monkeypatch.setattr(progress, "compile_kernels", lambda specs, device: calls.append(len(specs)) or {})
    monkeypatch.setenv("COIL_COMPILE_WORKERS", "2")
    progress.compile_with_progress([object()] * 5, torch.device("cpu"), "g")  # type: ignore[list-item]
    assert calls == [2, 2, 1] and bars[-1].done == 5 and bars[-1].closed
    calls.clear()
    monkeypatch.setenv("COIL_COMPILE_WORKERS", "0")  # no workers: chunks of the thread count
    monkeypatch.setenv("COIL_COMPILE_THREADS", "3")
    progress.compile_with_progress([object()] * 5, torch.device("cpu"), "g")  # type: ignore[list-item]
    assert calls == [3, 2]
    monkeypatch.setitem(sys.modules, "tqdm", None)  # not installed: no bar, one call
    assert progress.progress_bar(5, "g") is None


def test_check_outputs_names_graph_and_index() -> None:
    check_outputs("g", [torch.ones(3), torch.arange(3)])
    with pytest.raises(CoilCheckError, match=r"g: output 1 .* 1 NaN and 1 Inf"):
        check_outputs("g", [torch.ones(2), torch.tensor([1.0, float("nan"), float("inf")])])


def test_lifetime_tracker_rules() -> None:
    spans = [Span("a", 0, 1, 4, False), Span("b", 1, 1, 4, False), Span("c", 2, 3, 4, True)]
    t = LifetimeTracker("g", spans, returned={"c"}, storage={"c": "a"})
    t.begin()
    t.alloc("a")
    t.stepped()
    t.alloc("b")
    t.stepped()
    t.free("a")
    t.stepped()
    with pytest.raises(CoilCheckError, match="b freed after step 2, the plan frees it after step 1"):
        t.free("b")
    t.begin()
    t.alloc("a")
    t.stepped()
    t.stepped()
    with pytest.raises(CoilCheckError, match="c takes the storage of a before step 2, but a is needed until step 3"):
        t.spans["a"] = Span("a", 0, 3, 4, False)
        t.reuse("c", "a")
    t = LifetimeTracker("g", spans, returned={"c"}, storage={"c": "a"})
    t.begin()
    t.alloc("a")
    with pytest.raises(CoilCheckError, match=r"never freed nor returned: a .*hands its storage to c"):
        t.returning()
