"""An unrolled recurrence compiles natively, forward and backward: a Python loop over many time
steps (what Dynamo makes of transformers' sequential state-space scan, 1024 steps a layer) whose
states are stacked. The stack of more than CAT_MAX_POINTWISE_PARTS parts is ATen's cat (not a
fallback), and the chain of steps fuses into kernels of at most FUSION_MAX_OPS operations (made
small here, so that a short loop crosses it); at hundreds of steps both used to fail or stall
compilation."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
from check import run_both
from coil.backend import COMPILED
from coil.lowering_ir.ops.indexing import CAT_MAX_POINTWISE_PARTS
from coil.scheduler import fusion


class Recurrence(nn.Module):
    """h_t = a_t * h_(t-1) + x_t along the sequence, the stacked states projected by a linear layer."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.gate = nn.Linear(width, width)
        self.out = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = torch.sigmoid(self.gate(x))
        h = torch.zeros_like(x[:, 0])
        states = []
        for t in range(x.shape[1]):
            h = a[:, t] * h + x[:, t]
            states.append(h)
        return self.out(torch.stack(states, dim=1))


def test_unrolled_recurrence_compiles_natively(device: torch.device, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fusion, "FUSION_MAX_OPS", 16)
    torch.manual_seed(0)
    steps = 2 * CAT_MAX_POINTWISE_PARTS + 8
    run_both(Recurrence(4).to(device), torch.randn(2, steps, 4, device=device))
    assert sorted(s.name.split("_")[0] for s in COMPILED) == ["backward", "forward"]
    assert not [f for s in COMPILED for f in s.fallbacks]
