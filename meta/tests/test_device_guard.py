"""coil.backend.pipeline.device_guard: a compiled CUDA graph's callable makes its device current
where the process sees several GPUs (torch.cuda.device is recorded here: no GPU needed)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from coil.backend.pipeline.device_guard import on_device


@pytest.fixture
def current(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The 'current device' as torch.cuda.device sets it (starts at 0)."""
    now = [0]

    @contextlib.contextmanager
    def device(index: int) -> Iterator[None]:
        before = now[0]
        now[0] = index
        try:
            yield
        finally:
            now[0] = before

    monkeypatch.setattr(torch.cuda, "device", device)
    return now


def test_several_gpus_run_the_graph_on_its_device(current: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    seen: list[int] = []

    def run(args: list[Any]) -> Any:
        seen.append(current[0])
        return args[0] * 2

    guarded = on_device(run, torch.device("cuda", 1))
    assert guarded([torch.ones(2)]).tolist() == [2.0, 2.0]
    assert seen == [1] and current == [0]  # the caller's device is current again


@pytest.mark.parametrize(("device", "gpus"), [("cuda:0", 1), ("cuda", 2), ("cpu", 2)])
def test_one_gpu_an_unindexed_device_or_the_cpu_run_as_they_are(
        monkeypatch: pytest.MonkeyPatch, device: str, gpus: int) -> None:
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)

    def run(args: list[Any]) -> Any:
        return args

    assert on_device(run, torch.device(device)) is run
