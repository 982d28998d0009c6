"""pool_segments: expandable segments on for a capture only, the user's setting kept (CPU: the
allocator's setter is replaced by a recorder; test_gpu_fast.py checks the real pool's segments)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from coil.knobs import knobs
from coil.runtime import pool_segments


@pytest.fixture
def allocator(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A native allocator whose settings live in a string here; returns the setter's calls."""
    state = {"text": ""}
    calls: list[str] = []

    def set_(text: str) -> None:
        calls.append(text)
        state["text"] = text

    monkeypatch.setattr(pool_segments, "_native", lambda: True)
    monkeypatch.setattr(torch._C, "_accelerator_setAllocatorSettings", set_, raising=False)
    monkeypatch.setattr(torch._C, "_accelerator_getAllocatorSettings", lambda: state["text"], raising=False)
    return calls


def test_on_inside_and_restored_after(allocator: list[str]) -> None:
    with pool_segments.expandable_capture() as turned_on:
        assert turned_on
        assert pool_segments.expandable_now() is True
    assert pool_segments.expandable_now() is False
    assert allocator == ["expandable_segments:True", "expandable_segments:False"]


def test_restored_when_the_capture_raises(allocator: list[str]) -> None:
    with pytest.raises(RuntimeError, match="capture failed"), pool_segments.expandable_capture():
        raise RuntimeError("capture failed")
    assert pool_segments.expandable_now() is False
    assert allocator[-1] == "expandable_segments:False"


def test_a_user_setting_of_on_is_left_alone(allocator: list[str]) -> None:
    torch._C._accelerator_setAllocatorSettings("expandable_segments:True")
    allocator.clear()
    with pool_segments.expandable_capture() as turned_on:
        assert not turned_on
    assert allocator == []
    assert pool_segments.expandable_now() is True


def test_knob_off(allocator: list[str]) -> None:
    with knobs.override(graph_pool_expandable=False), pool_segments.expandable_capture() as turned_on:
        assert not turned_on
    assert allocator == []


def test_not_the_native_allocator(allocator: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pool_segments, "_native", lambda: False)
    with pool_segments.expandable_capture() as turned_on:
        assert not turned_on
    assert allocator == []


def test_a_setter_that_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(text: str) -> Any:
        raise RuntimeError("expandable_segments not supported by this allocator")

    monkeypatch.setattr(pool_segments, "_native", lambda: True)
    monkeypatch.setattr(torch._C, "_accelerator_setAllocatorSettings", refuse, raising=False)
    monkeypatch.setattr(torch._C, "_accelerator_getAllocatorSettings", lambda: "", raising=False)
    with pool_segments.expandable_capture() as turned_on:
        assert not turned_on


def test_env_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(torch._C, "_accelerator_getAllocatorSettings", raising=False)
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:128,expandable_segments:True")
    monkeypatch.delenv("PYTORCH_ALLOC_CONF", raising=False)
    assert pool_segments.expandable_now() is True
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:128")
    assert pool_segments.expandable_now() is False


def test_malformed_knob() -> None:
    with pytest.raises(ValueError, match="COIL_GRAPH_POOL_EXPANDABLE"), knobs.override(graph_pool_expandable="maybe"):
        pass
