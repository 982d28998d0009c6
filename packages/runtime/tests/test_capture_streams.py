"""`blas_workspaces_dropped` on the CPU: torch's cached cuBLAS workspaces are cleared on entry
and on exit, also when the body raises; a torch without the call is left alone. The oracle is
the count and order of the calls to the (recorded) clearing function. The GPU twin, that a
capture keeps no workspace in the ordinary pool, is in test_gpu_fast.py."""

from __future__ import annotations

import pytest
import torch
from coil.runtime.capture_streams import blas_workspaces_dropped


def test_workspaces_are_dropped_on_entry_and_on_exit(monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[str] = []
    monkeypatch.setattr(torch._C, "_cuda_clearCublasWorkspaces", lambda: events.append("clear"), raising=False)
    with blas_workspaces_dropped():
        events.append("body")
    assert events == ["clear", "body", "clear"]
    events.clear()
    with pytest.raises(RuntimeError, match="capture failed"), blas_workspaces_dropped():
        events.append("body")
        raise RuntimeError("capture failed")
    assert events == ["clear", "body", "clear"]


def test_a_torch_without_the_call_keeps_its_workspaces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(torch._C, "_cuda_clearCublasWorkspaces", raising=False)
    ran = []
    with blas_workspaces_dropped():
        ran.append(True)
    assert ran == [True]
