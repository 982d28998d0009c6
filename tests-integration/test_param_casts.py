"""Casts of parameters recomputed in the backward instead of saved (coil.backend.pipeline.param_casts),
end to end: an autocast training step compiled by backend="coil" (CPU autocast to bfloat16
here, Triton's interpreter; CUDA on the GPU) against the same step in eager mode, with the
partition post-process seen to act."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from coil.backend.pipeline import partition
from coil.knobs import knobs


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(512, 1024)
        self.down = torch.nn.Linear(1024, 512)  # its bf16 copy (1 MiB) is recomputed
        self.small = torch.nn.Linear(512, 64)  # 64 KiB: saved as before

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.small(self.down(torch.relu(self.up(x))))


def _step(model: Any, x: torch.Tensor, device: torch.device) -> tuple[torch.Tensor, list[torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    with torch.autocast(device.type, dtype=torch.bfloat16):
        loss = model(x).float().pow(2).mean()
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("recompute", [True, False])
def test_autocast_step_equals_eager(device: torch.device, recompute: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    done: list[int] = []
    real = partition.recompute_param_casts

    def counted(*args: Any, **kwargs: Any) -> int:
        n = real(*args, **kwargs)
        done.append(n)
        return n

    monkeypatch.setattr(partition, "recompute_param_casts", counted)
    torch.manual_seed(0)
    model = MLP().to(device)
    x = torch.randn(64, 512, device=device)
    want = [_step(model, x, device) for _ in range(2)]
    with knobs.override(fallback_on_error=False, recompute_param_casts=recompute):
        compiled = torch.compile(model, backend="coil")
        got = [_step(compiled, x, device) for _ in range(3)][:2]
    for (gl, gg), (wl, wg) in zip(got, want, strict=True):
        torch.testing.assert_close(gl, wl, rtol=2e-2, atol=1e-3)
        for a, b in zip(gg, wg, strict=True):
            torch.testing.assert_close(a, b, rtol=2e-2, atol=2e-3)
    if recompute:
        # down's weight: up's bf16 copy is not saved at all (x needs no gradient), small's is
        # under 1 MiB
        assert done == [1], done
    else:
        assert done == []
