"""The fused schedule is ordered by the memory planner: a peak never above the fused order's."""

from __future__ import annotations

import torch
from check import run_both
from coil.backend import COMPILED
from coil.knobs import knobs
from models import TransformerBlock


def test_planner_order_lowers_or_keeps_the_peak_and_stays_correct(device: torch.device) -> None:
    torch.manual_seed(0)
    with knobs.override(order_time=0.5):
        run_both(TransformerBlock().to(device), torch.randn(2, 8, 32, device=device), train=True)
    peaks = [s.planned_peak for s in COMPILED]
    assert all(p is not None for p in peaks), peaks
    assert all(p[1] <= p[0] for p in peaks if p is not None), peaks
    backward = next(s for s in COMPILED if s.name.startswith("backward"))
    assert backward.planned_peak is not None
    fused, used = backward.planned_peak
    assert used < fused  # this graph has a better order than the fused one (exact search proves it)
