"""Compiling keeps no frame of the caller: what the caller held when it returned (the compiling
call's result, a batch) goes when its last reference does, not at Python's next full collection.

An error kept after its `except` block, or left in a reference cycle through the frame that
raised it, holds its traceback, and the traceback every frame up to the user's. coil raises and
catches errors while it compiles (a fusion refused, a kernel variant that does not compile);
none may outlive its handler with its frames. The collector is off while each case runs, so a
cycle shows as a local that outlives its frame.
"""

from __future__ import annotations

import contextlib
import gc
import weakref
from collections.abc import Callable
from typing import Any

import pytest
import torch
from models import SmallCNN, TransformerBlock


class Transposed(torch.nn.Module):
    """A buffer read both as stored and transposed: the two do not fuse (a refusal)."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(16, 16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * self.w + 1
        return (y + y.t()).relu()


def _models(device: torch.device) -> dict[str, tuple[torch.nn.Module, torch.Tensor]]:
    return {
        "transformer": (TransformerBlock().to(device), torch.randn(2, 8, 32, device=device)),
        "cnn": (SmallCNN().to(device), torch.randn(2, 3, 16, 16, device=device)),
        "transposed": (Transposed().to(device), torch.randn(16, 16, device=device)),
    }


@pytest.mark.parametrize("name", ["transformer", "cnn", "transposed"])
@pytest.mark.parametrize("grad", [False, True], ids=["inference", "training"])
def test_the_compiling_call_keeps_no_frame_of_its_caller(monkeypatch: pytest.MonkeyPatch, device: torch.device,
                                                         name: str, grad: bool) -> None:
    monkeypatch.setenv("COIL_INLINE", "0")  # y stays a buffer its transposed reader cannot fuse with
    monkeypatch.setenv("COIL_AOT_CACHE", "0")  # every graph compiles: a hit in torch's cache schedules nothing
    model, x = _models(device)[name]
    compiled = torch.compile(model, backend="coil")

    def step(fn: Callable[[torch.Tensor], Any]) -> tuple[weakref.ref[torch.Tensor], torch.Tensor]:
        with torch.set_grad_enabled(grad):
            out = fn(x)
            if grad:
                out.sum().backward()
        return weakref.ref(out), out.detach().clone()

    # Dynamo's young-generation collection after a compile would hide a cycle that a longer
    # compile (its objects promoted to the old generation by the collections it runs) keeps
    no_gc_after = (torch._dynamo.config.patch(run_gc_after_compile=False)
                   if hasattr(torch._dynamo.config, "run_gc_after_compile") else contextlib.nullcontext())
    gc.collect()
    gc.disable()
    try:
        with no_gc_after:
            first, got = step(compiled)
        assert first() is None, "the compiling call's result outlived its caller"
    finally:
        gc.enable()
    model.zero_grad(set_to_none=True)
    _, want = step(model)
    torch.testing.assert_close(got, want)
