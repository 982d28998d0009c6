"""The gemm and attention suites' cases on the CPU, at their small sizes: each case's function, its
gradients, the harness's fp64 reference (sliced along the batch) and the attention cases'
FlexAttention forms equal a reference written here independently, in fp64."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
from coil.bench.attention import ATTENTION, WINDOW
from coil.bench.gemm import GEMM, LIMIT
from coil.bench.kernel_case import KernelCase, reference, step
from coil.bench.kernel_runs import accurate, prepare

CASES = {c.name: c for c in (*GEMM, *ATTENTION)}
T = torch.Tensor


def _gelu(y: T) -> T:
    return 0.5 * y * (1 + torch.erf(y / math.sqrt(2)))


def _attend(q: T, k: T, v: T, allowed: T | None = None, bias: T | float = 0.0) -> T:
    """softmax(q k^T / sqrt(D) + bias, -inf where not allowed) v, spelled out."""
    if k.shape[1] != q.shape[1]:
        k, v = (t.repeat_interleave(q.shape[1] // t.shape[1], dim=1) for t in (k, v))
    s = torch.einsum("bhid,bhjd->bhij", q, k) / math.sqrt(q.shape[-1]) + bias
    if allowed is not None:
        s = s.masked_fill(~allowed, float("-inf"))
    return torch.einsum("bhij,bhjd->bhid", torch.softmax(s, dim=-1), v)


def _prefix_keys(keep: T) -> T:
    """(B, S) keep of a padding mask, checked to keep a prefix of S/2..S keys in every row."""
    s = keep.shape[-1]
    lengths = keep.sum(-1)
    assert bool((lengths >= s // 2).all()) and bool((lengths <= s).all())
    assert torch.equal(keep, torch.arange(s)[None, :] < lengths[:, None])
    return keep[:, None, None, :]


def _causal(s: int) -> T:
    i = torch.arange(s)
    return i[None, :] <= i[:, None]


def _ref_padding_add(q: T, k: T, v: T, mask: T) -> T:
    assert torch.equal(mask, mask[:, :, :1, :].expand_as(mask))
    assert set(mask.unique().tolist()) <= {0.0, torch.finfo(torch.float64).min}
    return _attend(q, k, v, _prefix_keys(mask[:, 0, 0, :] == 0))


def _ref_window(q: T, k: T, v: T, w: int) -> T:
    i = torch.arange(q.shape[-2])
    return _attend(q, k, v, _causal(q.shape[-2]) & (i[:, None] - i[None, :] < w))


def _ref_alibi(q: T, k: T, v: T, slopes: T) -> T:
    h, s = q.shape[1], q.shape[-2]
    expect = torch.tensor([2 ** (-8 * (j + 1) / h) for j in range(h)], dtype=torch.float64)
    torch.testing.assert_close(slopes.double(), expect)
    i = torch.arange(s)
    return _attend(q, k, v, _causal(s), expect[:, None, None] * (i[None, :] - i[:, None]))


REFERENCES: dict[str, Callable[..., T]] = {
    "bare": lambda x, w: x @ w.T,
    "bias_gelu": lambda x, w, b: _gelu(x @ w.T + b),
    "residual": lambda x, w, r: r + x @ w.T,
    "tall_skinny": lambda x, w, b: x @ w.T + b,
    "small_batch": lambda x, w, b: x @ w.T + b,
    "bmm": lambda a, b: torch.einsum("bmk,bkn->bmn", a, b),
    "padding_add": _ref_padding_add,
    "padding_bool": lambda q, k, v, mask: _attend(q, k, v, _prefix_keys(mask[:, 0, 0, :])),
    "unmasked": lambda q, k, v: _attend(q, k, v),
    "relpos": lambda q, k, v, bias: _attend(q, k, v, bias=bias),
    "causal": lambda q, k, v: _attend(q, k, v, _causal(q.shape[-2])),
    "window": _ref_window,
    "alibi": _ref_alibi,
    "gqa": lambda q, k, v: _attend(q, k, v, _causal(q.shape[-2])),
}


def _form(case: KernelCase) -> str:
    name = case.name.removeprefix("gemm_").removeprefix("attn_")
    return next(f for f in sorted(REFERENCES, key=len, reverse=True) if name.startswith(f))


def _independent(case: KernelCase, args: tuple[Any, ...], grad_out: T | None) -> tuple[T, ...]:
    leaves = tuple(a.detach().clone().requires_grad_(i in case.grad) if isinstance(a, T) else a
                   for i, a in enumerate(args))
    out = REFERENCES[_form(case)](*leaves)
    if not case.grad:
        return (out.detach(),)
    return (out.detach(), *torch.autograd.grad(out, [leaves[i] for i in case.grad], grad_out))


@pytest.mark.parametrize("name", list(CASES))
def test_case_equals_an_independent_fp64_reference(name: str) -> None:
    case = CASES[name]
    p = prepare(case, "cpu", torch.float64, small=True)
    want = _independent(case, p.args, p.grad_out)
    got = step(case, case.fn, p.args, p.grad_out)()
    assert len(got) == 1 + len(case.grad)
    torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-9)
    # the harness's fp64 reference, one batch row at a time where the case slices it
    torch.testing.assert_close(reference(case, p.args, p.grad_out), want, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("name", [n for n, c in CASES.items() if c.flex is not None and not c.grad])
def test_flex_form_equals_the_case(name: str) -> None:
    """FlexAttention's backward has no CPU kernel: the forward cases check every form's values
    (each fwdbwd case shares its form's flex function)."""
    case = CASES[name]
    assert case.flex is not None
    p = prepare(case, "cpu", torch.float64, small=True)
    fn, args = case.flex(p.args)
    assert all(a is b for a, b in zip(args[:3], p.args[:3], strict=True))  # the same q, k, v
    with torch.no_grad():
        torch.testing.assert_close(fn(*args), _independent(case, p.args, None)[0], rtol=1e-7, atol=1e-7)


@pytest.mark.parametrize("name", list(CASES))
def test_case_runs_in_bf16_and_passes_the_accuracy_rule_against_itself(name: str) -> None:
    case = CASES[name]
    p = prepare(case, "cpu", torch.bfloat16, small=True)
    with torch.enable_grad() if case.grad else torch.no_grad():
        got = step(case, case.fn, p.args, p.grad_out)()
    assert all(t.dtype == torch.bfloat16 and bool(torch.isfinite(t.float()).all()) for t in got)
    assert accurate([0.0] * len(got), [0.0] * len(got))


def test_the_suites_shapes_and_references() -> None:
    gemm = {c.name: c for c in GEMM}
    for k, n in ((4096, 11008), (4096, 14336), (11008, 4096)):
        bare = f"gemm_bare_8192x{k}x{n}"
        assert gemm[bare].dims == {"M": 8192, "K": k, "N": n} and gemm[bare].reference_case is None
        for form in ("bias_gelu", "residual"):
            c = gemm[f"gemm_{form}_8192x{k}x{n}"]
            assert (c.reference_case, c.limit) == (bare, LIMIT)
    assert {"gemm_tall_skinny_65536x4096x128", "gemm_small_batch_16x4096x4096", "gemm_bmm_32x2048x128x2048"} < set(gemm)
    attn = {c.name: c for c in ATTENTION}
    assert attn["attn_padding_add_fwd"].dims == {"B": 16, "H": 12, "S": 512, "D": 64}
    assert attn["attn_padding_add_fwd"].reference_case == "attn_unmasked_fwd"
    assert attn["attn_padding_add_fwdbwd"].reference_case == "attn_unmasked_fwdbwd"
    assert attn["attn_causal_fwd"].dims == {"B": 4, "H": 12, "S": 4096, "D": 64}
    assert attn["attn_window_fwd"].dims["S"] == 8192 and attn["attn_window_fwd"].dims["W"] == WINDOW
    assert all(c.flex is not None for c in ATTENTION)
    for c in (*GEMM, *ATTENTION):  # a bf16 argument of the real size stays well below a few GiB
        assert c.flops(c.dims) > 0
        args = c.make(c.small, "meta", torch.bfloat16)
        assert all(isinstance(a, int | T) for a in args)
    with pytest.raises(ValueError, match="group"):
        KernelCase("x", "micro", "", lambda: None, lambda d, dev, dt: (), {}, {}, lambda d: 0.0)
