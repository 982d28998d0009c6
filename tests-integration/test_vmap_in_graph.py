"""torch.vmap inside compiled code (Dynamo records it as calls entering and leaving vmap levels
around the batched ops; HF's Mamba family runs its scan's combine function this way): compiled
with backend="coil" natively, equal to eager, forward and backward, several vmaps in one graph."""

from __future__ import annotations

import torch
import torch.nn as nn
from check import run_both
from coil.backend import COMPILED


class VmappedTwice(nn.Module):
    """A per-row linear map by vmap, then a second vmap over the result (two levels, in turn)."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(6, 6) / 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = torch.vmap(lambda r: self.w @ r)(x)
        return torch.vmap(lambda a, b: torch.tanh(a) * b + 1)(rows, x)


def test_two_vmaps_compile_natively(device: torch.device) -> None:
    torch.manual_seed(0)
    run_both(VmappedTwice().to(device), torch.randn(5, 6, device=device), train=False)
    assert COMPILED and all(s.eager_fallback is None for s in COMPILED), [s.eager_fallback for s in COMPILED]


def test_two_vmaps_train_natively(device: torch.device) -> None:
    torch.manual_seed(0)
    run_both(VmappedTwice().to(device), torch.randn(5, 6, device=device), train=True)
    assert sorted(s.name.split("_")[0] for s in COMPILED) == ["backward", "forward"]
    assert all(s.eager_fallback is None for s in COMPILED), [s.eager_fallback for s in COMPILED]
