"""Lowerings added for OpInfo coverage, end to end: compiled with backend="coil" (Triton
kernels, the CPU interpreter here) against eager, on non-contiguous inputs, and native: no ATen
fallback and no graph break."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from coil.backend import COMPILED
from coil.knobs import knobs
from torch._dynamo.utils import counters

Make = Callable[[torch.device], tuple[torch.Tensor, ...]]


def _nc(d: torch.device, *shape: int) -> torch.Tensor:
    """A non-contiguous (transposed) tensor of `shape`."""
    return torch.randn(*reversed(shape), device=d).t() if len(shape) == 2 else torch.randn(*shape, device=d)


CASES: dict[str, tuple[Callable[..., object], Make]] = {
    "flip": (lambda x: torch.flip(x, (0, 1)) + 1, lambda d: (_nc(d, 4, 6),)),
    "rot90": (lambda x: torch.rot90(x, 1, (0, 1)), lambda d: (_nc(d, 4, 6),)),
    "slice_scatter": (lambda x, s: torch.slice_scatter(x, s, 1, 1, 6, 2),
                      lambda d: (_nc(d, 4, 6), _nc(d, 4, 3))),
    "diagonal_scatter": (lambda x, s: torch.diagonal_scatter(x, s, -1),
                         lambda d: (_nc(d, 4, 6), torch.randn(3, device=d))),
    "index_reduce_amax": (lambda x, s, i: x.index_reduce(0, i, s, "amax", include_self=False),
                          lambda d: (_nc(d, 4, 5), _nc(d, 3, 5), torch.tensor([3, 0, 3], device=d))),
    "index_reduce_mean": (lambda x, s, i: x.index_reduce(1, i, s, "mean"),
                          lambda d: (_nc(d, 4, 5), _nc(d, 4, 3), torch.tensor([4, 0, 4], device=d))),
    "scatter_reduce_prod": (lambda x, s, i: x.scatter_reduce(0, i, s, "prod"),
                            lambda d: (_nc(d, 4, 5), _nc(d, 3, 5), torch.tensor([[0, 1, 0], [3, 3, 1]], device=d))),
    "lgamma_digamma": (lambda x: (torch.lgamma(x), torch.digamma(x)), lambda d: (_nc(d, 4, 6) * 4,)),
    "polygamma": (lambda x: (torch.polygamma(1, x), torch.polygamma(3, x)), lambda d: (_nc(d, 4, 6) * 4,)),
    "bessel_i": (lambda x: (torch.i0(x), torch.special.i1e(x)), lambda d: (_nc(d, 4, 6) * 6,)),
    "bessel_jyk": (lambda x: (torch.special.bessel_j1(x), torch.special.bessel_y0(x.abs()),
                              torch.special.modified_bessel_k1(x.abs()), torch.special.airy_ai(x)),
                   lambda d: (_nc(d, 4, 6) * 6,)),
    "erfinv_ndtri": (lambda u: (torch.erfinv(u * 2 - 1), torch.special.ndtri(u)),
                     lambda d: (torch.rand(6, 4, device=d).t(),)),
    "zeta": (lambda x, q: torch.special.zeta(x.abs() + 1.5, q), lambda d: (_nc(d, 4, 6), _nc(d, 4, 6) * 3)),
    "mvlgamma": (lambda x: torch.mvlgamma(x.abs() + 2, 3), lambda d: (_nc(d, 4, 6),)),
    # Dynamo writes these in-place forms with a value as Inductor's prim fma (optimizers' updates)
    "addcmul_addcdiv_fma": (lambda x, a, b: (x.clone().addcmul_(a, b, value=0.5),
                                             x.clone().addcdiv_(a, b.abs() + 1, value=-2.0)),
                            lambda d: (_nc(d, 4, 6), _nc(d, 4, 6), _nc(d, 4, 6))),
}


def _compile_native(fn: Callable[..., object], *args: torch.Tensor) -> object:
    counters.clear()
    with knobs.override(fallback_on_error=False):
        out = torch.compile(fn, backend="coil")(*args)
    assert [f for s in COMPILED for f in s.fallbacks] == []
    assert sum(s.kernels for s in COMPILED) >= 1
    assert not counters["graph_break"], dict(counters["graph_break"])
    return out


@pytest.mark.parametrize("name", sorted(CASES))
def test_native_and_equal_to_eager(name: str, device: torch.device) -> None:
    torch.manual_seed(0)
    fn, make = CASES[name]
    args = make(device)
    assert not args[0].is_contiguous() or args[0].dim() < 2
    out = _compile_native(fn, *args)
    torch.testing.assert_close(out, fn(*args), equal_nan=True)


def test_lgamma_gradient_is_native_digamma(device: torch.device) -> None:
    x = (_nc(device, 3, 5) * 3).requires_grad_(True)
    out = _compile_native(torch.lgamma, x)
    assert isinstance(out, torch.Tensor)
    (g,) = torch.autograd.grad(out.sum(), x)
    torch.testing.assert_close(g, torch.digamma(x.detach()))
    assert [f for s in COMPILED for f in s.fallbacks] == []


def test_empty_ops_are_native_with_eager_layout(device: torch.device) -> None:
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (torch.empty_like(x), torch.empty_strided((3, 4), (1, 3), device=x.device),
                x.new_empty((2, 5)), torch.empty(2, 3, device=x.device))

    x = _nc(device, 4, 6)
    out = _compile_native(fn, x)
    assert isinstance(out, tuple)
    for got, want in zip(out, fn(x), strict=True):  # values are undefined: compare the layout
        assert (got.shape, got.stride(), got.dtype, got.device) == (want.shape, want.stride(), want.dtype, want.device)


RANDOM: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "uniform_": lambda x: x.clone().uniform_(-2.0, 3.0),
    "normal_": lambda x: x.clone().normal_(1.0, 2.0),
    "exponential_": lambda x: x.clone().exponential_(2.0),
    "geometric_": lambda x: x.clone().geometric_(0.25),
    "log_normal_": lambda x: x.clone().log_normal_(0.0, 0.25),
    "cauchy_": lambda x: x.clone().cauchy_(),
    "randint_like": lambda x: torch.randint_like(x, 3, 9),
    "normal_tensor": lambda x: torch.normal(x + 1.0, 2.0),
    "rrelu": lambda x: torch.nn.functional.rrelu(x - 0.5, 0.1, 0.3, training=True),
    "dropout2d": lambda x: torch.nn.functional.dropout2d(x.unsqueeze(0) + 1, 0.5, training=True),
}
# (mean, std) each distribution has (None: not checked); x is all zeros
MOMENTS: dict[str, tuple[float | None, float | None]] = {
    "uniform_": (0.5, 5 / 12**0.5), "normal_": (1.0, 2.0), "exponential_": (0.5, 0.5),
    "geometric_": (4.0, 12**0.5), "log_normal_": (1.0317, 0.2615), "cauchy_": (None, None),
    "randint_like": (5.5, (35 / 12) ** 0.5), "normal_tensor": (1.0, 2.0), "rrelu": (-0.1, 0.0289),
    "dropout2d": (None, None),  # checked below: whole channels are dropped
}


@pytest.mark.parametrize("name", sorted(RANDOM))
def test_random_ops_are_native_reproducible_and_well_distributed(name: str, device: torch.device) -> None:
    fn = RANDOM[name]
    x = torch.zeros(400, 50, device=device)
    torch.manual_seed(0)
    a = _compile_native(fn, x)
    torch.manual_seed(0)
    b = torch.compile(fn, backend="coil")(x)
    assert isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
    assert torch.equal(a, b)  # same seed, same numbers
    ref = fn(x)
    assert (a.shape, a.dtype) == (ref.shape, ref.dtype)
    mean, std = MOMENTS[name]
    n = a.numel()
    got = a.double()
    if mean is not None:
        tol = 5 * (std if std is not None else 1.0) / n**0.5 + 1e-3
        assert abs(got.mean().item() - mean) < tol, (got.mean().item(), mean)
    if std is not None:
        assert abs(got.std().item() - std) < 0.05 * std + 1e-3, (got.std().item(), std)
    if name == "dropout2d":  # each of the 400 channels is all 0 or all 1 / (1 - p)
        rows = got[0]
        assert bool(((rows == 0).all(1) | (rows == 2).all(1)).all())
        assert 0.35 < (rows[:, 0] == 0).double().mean().item() < 0.65
