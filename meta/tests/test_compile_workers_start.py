"""When coil starts its compile workers: for a graph with CUDA inputs that it compiles for real,
never for one it only loads from a cache (a warm start) or one that runs on the CPU or in Triton's
interpreter."""

from __future__ import annotations

import pytest
import torch
from torch._subclasses import FakeTensorMode


def _graph(device: str) -> torch.fx.GraphModule:
    g = torch.fx.Graph()
    x = g.placeholder("x")
    with FakeTensorMode():
        x.meta["val"] = torch.empty(4, device=device)
    g.output(g.call_function(torch.ops.aten.relu.default, (x,)))
    return torch.fx.GraphModule({}, g)


@pytest.mark.parametrize(("device", "interpret", "starts"), [("cuda", False, True), ("cuda", True, False),
                                                             ("cpu", False, False)])
def test_workers_start_for_a_real_gpu_compile_only(monkeypatch: pytest.MonkeyPatch, device: str,
                                                   interpret: bool, starts: bool) -> None:
    from coil.backend.pipeline import compile as backend_compile
    calls: list[int] = []
    monkeypatch.setattr(backend_compile, "prestart_compile_workers", lambda: calls.append(1))
    monkeypatch.setattr(backend_compile, "interpreter_enabled", lambda device: interpret)
    backend_compile._prestart_workers(_graph(device))
    assert calls == ([1] if starts else [])
