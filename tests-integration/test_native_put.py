"""put end to end (backend="coil", Triton kernels; the CPU interpreter here): forward with
negative and duplicate indices, accumulate, and the backward of take (a put with accumulate
into zeros) run without ATen fallbacks and equal eager."""

from __future__ import annotations

import pytest
import torch
from coil.backend import COMPILED
from coil.knobs import knobs


def _fallbacks() -> list[str]:
    return [f for s in COMPILED for f in s.fallbacks]


@pytest.mark.parametrize("accumulate", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool])
def test_put_forward(device: torch.device, dtype: torch.dtype, accumulate: bool) -> None:
    x = torch.arange(12, device=device).reshape(3, 4).to(dtype)
    # duplicates only when accumulating: which plain write wins is unspecified
    index = torch.tensor([[1, 1], [-1, 7]] if accumulate else [[1, 0], [-1, 7]], device=device)
    source = torch.tensor([3, 5, 7, 11], device=device).to(dtype)

    def fn(x: torch.Tensor, i: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        return torch.put(x, i, s, accumulate=accumulate)

    with knobs.override(fallback_on_error=False):
        got = torch.compile(fn, backend="coil")(x, index, source)
    torch.testing.assert_close(got, fn(x, index, source))
    assert _fallbacks() == []


def test_put_and_take_backward(device: torch.device) -> None:
    torch.manual_seed(0)
    x = torch.randn(3, 4, device=device, dtype=torch.float64)
    s = torch.randn(2, 2, device=device, dtype=torch.float64)
    index = torch.tensor([[0, -1], [5, 5]], device=device)

    def fn(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        return torch.take(torch.put(x, index.flip(0)[0], s[0] * 2, accumulate=True), index) * 3

    xr, sr = x.clone().requires_grad_(), s.clone().requires_grad_()
    xc, sc = x.clone().requires_grad_(), s.clone().requires_grad_()
    want = fn(xr, sr)
    with knobs.override(fallback_on_error=False):
        got = torch.compile(fn, backend="coil")(xc, sc)
    torch.testing.assert_close(got, want)
    cot = torch.linspace(-1, 1, 4, device=device, dtype=torch.float64).reshape(2, 2)
    for a, b in zip(torch.autograd.grad(got, (xc, sc), cot), torch.autograd.grad(want, (xr, sr), cot), strict=True):
        torch.testing.assert_close(a, b)
    assert _fallbacks() == []
