"""Random ops: native, reproducible under torch.manual_seed, and with the right distribution."""

from __future__ import annotations

import torch
from coil.backend import COMPILED
from coil.knobs import knobs


def _fn(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return (torch.nn.functional.dropout(x, 0.3, training=True) * 2, torch.rand_like(x),
            torch.randn(2000, 10, device=x.device), torch.bernoulli(torch.full_like(x, 0.25)))


def test_same_seed_same_mask_and_distributions(device: torch.device) -> None:
    compiled = torch.compile(_fn, backend="coil")
    x = torch.ones(2000, 10, device=device)
    with knobs.override(fallback_on_error=False):
        torch.manual_seed(0)
        a = compiled(x)
        torch.manual_seed(0)
        b = compiled(x)
        torch.manual_seed(1)
        c = compiled(x)
    assert all(torch.equal(u, v) for u, v in zip(a, b, strict=True))
    assert not any(torch.equal(u, v) for u, v in zip(a, c, strict=True))
    assert [f for s in COMPILED for f in s.fallbacks] == []
    drop, uni, nrm, ber = (t.double() for t in a)
    n = drop.numel()
    kept = (drop != 0).double().mean().item()
    assert abs(kept - 0.7) < 4 * (0.21 / n) ** 0.5  # binomial: within 4 sigma
    torch.testing.assert_close(drop[drop != 0], torch.full_like(drop[drop != 0], 2 / 0.7))
    assert uni.min().item() >= 0 and uni.max().item() < 1
    assert abs(uni.mean().item() - 0.5) < 4 * (1 / 12 / n) ** 0.5
    assert abs(nrm.mean().item()) < 4 / nrm.numel() ** 0.5 and abs(nrm.std().item() - 1) < 0.05
    assert abs(ber.mean().item() - 0.25) < 4 * (0.1875 / n) ** 0.5
