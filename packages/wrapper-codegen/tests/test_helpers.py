"""The wrappers' run-time allocator (helpers.fast_empty): torch's C fast path only where it
allocates on the right device."""

from __future__ import annotations

import pytest
import torch
from coil.wrapper_codegen import helpers

Call = tuple[str, tuple[int, ...], torch.dtype]


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[Call]:
    """Record the fast path's and the slow path's allocations (CPU tensors stand in for CUDA's)."""
    made: list[Call] = []
    empty = torch.empty_strided

    def fast(size: tuple[int, ...], stride: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        made.append(("fast", size, dtype))
        return empty(size, stride, dtype=dtype)

    def slow(size: tuple[int, ...], stride: tuple[int, ...], *, dtype: torch.dtype,
             device: torch.device) -> torch.Tensor:
        made.append(("slow", size, dtype))
        return empty(size, stride, dtype=dtype)

    monkeypatch.setattr(helpers, "_empty_strided_cuda", fast)
    monkeypatch.setattr(torch, "empty_strided", slow)
    return made


@pytest.mark.parametrize("gpus", [1, 2])
def test_the_fast_path_allocates_on_the_current_device_only(
        calls: list[Call], monkeypatch: pytest.MonkeyPatch, gpus: int) -> None:
    current = [0]
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    monkeypatch.setattr(helpers, "_current_cuda_device", lambda: current[0])
    alloc = helpers.fast_empty(torch.device("cuda", 1 if gpus == 2 else 0))
    got = alloc((2, 3), (3, 1), torch.float16)
    assert got.shape == (2, 3) and got.stride() == (3, 1) and got.dtype == torch.float16
    if gpus == 1:  # one GPU: the current device is the only one
        assert calls == [("fast", (2, 3), torch.float16)]
        return
    assert calls == [("slow", (2, 3), torch.float16)]  # cuda:1 while cuda:0 is current
    current[0] = 1
    alloc((4,), (1,), torch.float32)
    assert calls[1:] == [("fast", (4,), torch.float32)]


def test_an_unindexed_cuda_device_is_the_current_one(calls: list[Call], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    helpers.fast_empty(torch.device("cuda"))((5,), (1,), torch.int32)
    assert calls == [("fast", (5,), torch.int32)]
