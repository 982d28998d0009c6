"""Weight normalisation trains natively: a convolution under `nn.utils.parametrizations.weight_norm`
(Wav2Vec2's positional convolution: dim 2, the kernel's last dim; or dim 0) and a linear layer
(dim 0); forward and gradients equal eager, and the fused backward
`_weight_norm_interface_backward` no longer runs as an ATen fallback."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
from check import run_both
from coil.backend import COMPILED


class WeightNormed(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        conv = nn.Conv1d(8, 8, kernel_size=5, padding=2, groups=2)
        self.conv = nn.utils.parametrizations.weight_norm(conv, name="weight", dim=dim)
        self.fc = nn.utils.parametrizations.weight_norm(nn.Linear(8, 4), dim=0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.nn.functional.gelu(self.conv(x)) + x
        return self.fc(h.transpose(1, 2))


@pytest.mark.parametrize("dim", [0, 2])
def test_weight_norm_trains_natively(device: torch.device, dim: int) -> None:
    torch.manual_seed(0)
    run_both(WeightNormed(dim).to(device), torch.randn(3, 8, 16, device=device))
    assert sorted(s.name.split("_")[0] for s in COMPILED) == ["backward", "forward"]
    fallbacks = [f for s in COMPILED for f in s.fallbacks]
    assert not any("weight_norm" in f for f in fallbacks), fallbacks
