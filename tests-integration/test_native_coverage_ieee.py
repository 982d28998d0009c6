"""End to end (backend="coil", Triton kernels; the CPU interpreter here), forward and backward:
the IEEE-754-aware pointwise ops (signbit, copysign, fmax/fmin, hypot, ldexp, round(decimals),
angle), as_strided_scatter, and the composites coil decomposes (repeat, group norm, elu with
alpha/scale/input_scale, selu, the *_copy ops, dist) run without ATen fallbacks and equal eager,
on inputs holding signed zeros, infinities, NaN and rounding ties."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
from coil.backend import COMPILED, knobs

aten = torch.ops.aten
NAN, INF = math.nan, math.inf
EDGES = [0.0, -0.0, 1.5, -1.5, 2.5, -2.5, INF, -INF, NAN, 3.0, -7.25, 0.125]


def _fallbacks() -> list[str]:
    return [f for s in COMPILED for f in s.fallbacks]


def _grid(device: torch.device, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    e = torch.tensor(EDGES, dtype=dtype, device=device)
    return e[:, None].expand(len(EDGES), len(EDGES)).contiguous(), e[None, :].expand(len(EDGES), len(EDGES)).contiguous()


def _same(got: Any, want: Any, *, zero_sign: bool = True, **tol: float) -> None:
    torch.testing.assert_close(got, want, equal_nan=True, **tol)
    if zero_sign and want.is_floating_point():
        assert torch.equal(torch.signbit(got[want == 0]), torch.signbit(want[want == 0])), "sign of a zero differs"


def _forward(fn: Callable[..., Any], *args: torch.Tensor, zero_sign: bool = True, **tol: float) -> None:
    with knobs.override(fallback_on_error=False):
        got = torch.compile(fn, backend="coil")(*args)
    _same(got, fn(*args), zero_sign=zero_sign, **tol)
    assert _fallbacks() == []


def _train(fn: Callable[..., torch.Tensor], *args: torch.Tensor, **tol: float) -> None:
    """Forward and the gradients of every floating input, compiled vs eager (a fixed cotangent)."""
    ref = [a.detach().clone().requires_grad_(a.is_floating_point()) for a in args]
    cmp = [a.detach().clone().requires_grad_(a.is_floating_point()) for a in args]
    want = fn(*ref)
    with knobs.override(fallback_on_error=False):
        got = torch.compile(fn, backend="coil")(*cmp)
    _same(got, want, **tol)
    cot = torch.linspace(-1.0, 1.0, want.numel(), dtype=want.dtype, device=want.device).reshape(want.shape)
    floats = [i for i, a in enumerate(args) if a.is_floating_point()]
    g_want = torch.autograd.grad(want, [ref[i] for i in floats], cot)
    g_got = torch.autograd.grad(got, [cmp[i] for i in floats], cot)
    for a, b in zip(g_got, g_want, strict=True):
        torch.testing.assert_close(a, b, equal_nan=True, **tol)
    assert _fallbacks() == []
    assert all(s.eager_fallback is None for s in COMPILED)


# -- forward: exact edge-value behaviour ----------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_signbit_copysign_fmax_fmin_on_edge_values(device: torch.device, dtype: torch.dtype) -> None:
    a, b = _grid(device, dtype)
    _forward(lambda a, b: torch.stack([torch.signbit(a).to(a.dtype), torch.copysign(a, b)]), a, b)
    # which zero fmax(0.0, -0.0) returns is unspecified (C's fmax): zeros' signs are not compared
    _forward(lambda a, b: torch.stack([torch.fmax(a, b), torch.fmin(a, b)]), a, b, zero_sign=False)


def test_integer_and_bool_operands(device: torch.device) -> None:
    i = torch.tensor([[-3, 0, 7], [2, -1, 0]], device=device, dtype=torch.int32)
    t = torch.tensor([[True, False, True], [False, False, True]], device=device)
    _forward(lambda i, t: torch.stack([torch.fmax(i, i.flip(1)), torch.fmin(i, t), torch.signbit(i).int(),
                                       torch.fmax(t, t.flip(0)).int()]), i, t)
    _forward(lambda i: torch.stack([torch.copysign(i, -i), torch.angle(i), torch.ldexp(i, i)]), i)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("decimals", [0, 2, -2])
def test_round_decimals_and_angle(device: torch.device, dtype: torch.dtype, decimals: int) -> None:
    torch.manual_seed(0)
    ties = torch.tensor([0.5, 1.5, 2.5, -2.5, 0.125, 1250.0, 1350.0, 15.0, -0.0, INF, NAN], device=device)
    x = torch.cat([ties, torch.randn(53, device=device) * 300]).to(dtype)
    _forward(lambda x: torch.stack([torch.round(x, decimals=decimals), torch.angle(x)]), x, rtol=0, atol=0)


def test_hypot_and_ldexp_avoid_overflow(device: torch.device) -> None:
    big = torch.tensor([3e38, 2e38, 1e-30, 0.0, INF, NAN], device=device)
    _forward(lambda a, b: torch.hypot(a, b), big, big.flip(0))
    e = torch.tensor([0, -3, 100, -149, 2, 1], device=device, dtype=torch.int32)
    _forward(lambda x, e: torch.ldexp(x, e), torch.tensor([1.0, -8.0, 1e-30, 1.0, 3.0, -0.0], device=device), e)


# -- forward and backward --------------------------------------------------------------------------


TRAIN: dict[str, tuple[Callable[..., torch.Tensor], int]] = {
    # name: (fn of (x, y), how many inputs it takes)
    "fmax_fmin": (lambda x, y: torch.fmax(x, y) * 2 + torch.fmin(x, y), 2),
    "copysign": (lambda x, y: torch.copysign(x, y), 2),
    "hypot": (lambda x, y: torch.hypot(x, y), 2),
    "ldexp": (lambda x, y: torch.ldexp(x, y), 2),
    "elu_alpha_scale_input_scale": (lambda x: aten.elu(x, 0.7, 1.3, 2.0), 1),
    "selu_celu": (lambda x: torch.selu(x) + torch.celu(x, 0.5), 1),
    "repeat": (lambda x: x.repeat(2, 1, 3), 1),
    "tile": (lambda x: torch.tile(x, (2, 1, 1, 2)), 1),
    "group_norm": (lambda x: torch.nn.functional.group_norm(x, 2, x[0, :, 0] + 1, x[1, :, 1]), 1),
    "native_group_norm_all_outputs": (
        # N = 1 with grads of mean and rstd: the backward once made the scheduler's fusion cycle
        lambda x: torch.cat([t.flatten() for t in aten.native_group_norm(x[:1], x[0, :, 0], None, 1, 4, 3, 2, 0.5)]), 1),
    "instance_norm": (lambda x: torch.nn.functional.instance_norm(x), 1),
    "narrow_copy_permute_copy": (lambda x: torch.narrow_copy(x, 1, 1, 2) + torch.permute_copy(x, (0, 1, 2))[:, 1:3], 1),
    "unbind_copy": (lambda x: torch.stack(torch.unbind_copy(x, 2)) * 3, 1),
    "as_strided_copy": (lambda x: torch.as_strided_copy(x, (3, 2), (2, 5), 1) * 2, 1),
    "as_strided_scatter": (lambda x: torch.as_strided_scatter(x, x[0, :2, :2].exp(), (2, 2), (1, 3), 2), 1),
    "dist": (lambda x, y: torch.dist(x, y) + torch.dist(x, y, 3.0), 2),
}


# with COIL_VERIFY=1 (this suite's default) the fx-passes verifier rejects the backward graph
# AOTAutograd makes for *any* as_strided view with a storage offset (x.as_strided(...).clone()
# too): its functionalised `aten.copy` into the view carries the view's offset in meta["val"]
# ("storage offset 1 != fresh 0"). Not a lowering problem: these run again below with verify off.
VERIFIER_REJECTS = {"as_strided_copy", "as_strided_scatter"}


@pytest.mark.parametrize("name", [
    pytest.param(n, marks=pytest.mark.xfail(strict=True, reason="fx-passes verifier: meta-val of the copy "
                                                                 "into an offset as_strided view"))
    if n in VERIFIER_REJECTS else n for n in sorted(TRAIN)])
def test_forward_and_backward_match_eager(device: torch.device, name: str) -> None:
    _train_case(device, name)


@pytest.mark.parametrize("name", sorted(VERIFIER_REJECTS))
def test_as_strided_forward_and_backward_without_verifier(device: torch.device, name: str,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COIL_VERIFY", "0")
    _train_case(device, name)


def _train_case(device: torch.device, name: str) -> None:
    fn, n = TRAIN[name]
    torch.manual_seed(3)
    x = torch.randn(2, 4, 3, device=device, dtype=torch.float64)
    y = torch.randn(2, 4, 3, device=device, dtype=torch.float64)
    if name == "ldexp":
        y = torch.randint(-4, 5, (2, 4, 3), device=device)
    if name == "copysign":
        y[0, 0, 0], y[0, 0, 1] = 0.0, -0.0
    if name == "fmax_fmin":
        x[0, 0, 0], y[0, 1, 0], x[1, 1, 1], y[1, 1, 1] = NAN, NAN, NAN, NAN
        y[1, 2, 2] = x[1, 2, 2]  # a tie
    _train(fn, *([x, y][:n]))
