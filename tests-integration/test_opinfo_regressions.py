"""End-to-end regressions for bugs the OpInfo sweep found, each against eager PyTorch.

Each test names the sweep's failure it guards against and where the fix lives.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from coil.backend import COMPILED
from coil.knobs import knobs


def _compiled(fn: Callable[..., Any], *args: Any) -> Any:
    """fn compiled by coil with compile errors raised (no silent eager fallback)."""
    with knobs.override(fallback_on_error=False):
        return torch.compile(fn, backend="coil")(*args)


# -- bool accumulation (triton-codegen kernel.scatter_store: no int1 atomics) ----------------------

BOOL_ACCUMULATE: dict[str, Callable[..., torch.Tensor]] = {
    "index_add": lambda x, i, v: x.index_add(0, i, v),
    "scatter_add": lambda x, i, v: x.scatter_add(0, i[:, None].expand(-1, x.shape[1]), v),
    "index_put_accumulate": lambda x, i, v: x.index_put((i,), v, accumulate=True),
    "masked_index_put_accumulate": lambda x, i, v: torch.ops.aten._unsafe_masked_index_put_accumulate(
        x, (i > 0)[:, None], [i], v),
}


@pytest.mark.parametrize("name", sorted(BOOL_ACCUMULATE))
def test_bool_accumulation_is_logical_or(name: str, device: torch.device) -> None:
    """Was: InterpreterError 'atomic_add does not support int1' (index_add, scatter_add, ...)."""
    fn = BOOL_ACCUMULATE[name]
    gen = torch.Generator().manual_seed(0)
    x = (torch.rand(5, 3, generator=gen) > 0.7).to(device)
    i = torch.tensor([0, 2, 2, 4, 0, 1], device=device)  # repeated targets: several writers
    v = (torch.rand(6, 3, generator=gen) > 0.5).to(device)
    got = _compiled(fn, x, i, v)
    assert torch.equal(got, fn(x, i, v))
    assert [f for s in COMPILED for f in s.fallbacks] == []


# -- casts to bfloat16 (triton-codegen casts.py) ---------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_int_to_bfloat16_matches_eager(dtype: torch.dtype, device: torch.device) -> None:
    """Was: Tensor.bfloat16() of int32/int64 returned reinterpreted bits on the interpreter."""
    x = torch.tensor([16777217, 2**24 + 2**16 + 1, 16843009, 65793, -(2**31), 2**31 - 1, -7], device=device).to(dtype)
    assert torch.equal(_compiled(lambda t: t.bfloat16(), x), x.bfloat16())


def test_mean_in_bfloat16_is_finite(device: torch.device) -> None:
    """Was: nanmean/masked.mean in bfloat16 returned -inf (the element count, cast to bfloat16,
    read as garbage)."""
    x = torch.randn(5, 7, device=device).bfloat16()
    x[1, 2] = float("nan")
    torch.testing.assert_close(_compiled(lambda t: t.nanmean(), x), x.nanmean())


# -- ops returning None (lowering-ir lowerer.extern) -------------------------------------------------

def _one_hot(t: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.one_hot(t, num_classes=10)


def test_one_hot_of_a_0d_tensor(device: torch.device) -> None:
    x = torch.tensor(3, device=device)
    assert torch.equal(_compiled(_one_hot, x), _one_hot(x))


def _torch_traces_the_one_hot_check() -> bool:
    """Whether torch's own trace of one_hot on the CPU has its range check (`aten._assert_async`):
    torch 2.15's has, 2.11's has none (for every backend, Inductor too)."""
    from functorch.compile import aot_function

    seen: list[str] = []

    def record(gm: torch.fx.GraphModule, _: Any) -> torch.fx.GraphModule:
        seen.extend(str(n.target) for n in gm.graph.nodes)
        return gm

    aot_function(_one_hot, fw_compiler=record)(torch.tensor(3))
    return any("_assert_async" in t for t in seen)


@pytest.mark.xfail(not _torch_traces_the_one_hot_check(), strict=True,
                   reason=f"torch {torch.__version__}'s trace of one_hot has no range check to keep")
def test_one_hot_keeps_its_range_check_on_the_cpu() -> None:
    """Was: KeyError 'val' lowering aten._assert_async.msg (it returns None). The check is the
    CPU's: eager's CUDA one_hot has no host-side range check (its scatter's device-side assert
    stops the process instead), and its graph on CUDA has no assert to keep."""
    cpu = torch.device("cpu")
    assert torch.equal(_compiled(_one_hot, torch.tensor(3, device=cpu)), _one_hot(torch.tensor(3)))
    torch._dynamo.reset()
    with pytest.raises(RuntimeError, match="num_classes"):
        _compiled(_one_hot, torch.tensor(12, device=cpu))


# -- conjugate views (fx-passes remove_noops kept _conj) -------------------------------------------

def test_ifft_of_a_real_input(device: torch.device) -> None:
    """Was: fft.ifft/ihfft/hfft2 values conjugated (the _conj view removed as an identity view)."""
    x = torch.randn(4, 6, device=device)
    torch.testing.assert_close(_compiled(torch.fft.ifft, x), torch.fft.ifft(x))


def test_polar_gradients(device: torch.device) -> None:
    """Was: a compile error on the literal 1j (wrapper-codegen), then wrong gradients wrt the
    magnitude (the dropped _conj in the backward)."""
    gen = torch.Generator().manual_seed(0)
    mag = (torch.rand(5, generator=gen) + 0.5).double().to(device).requires_grad_()
    ang = (torch.randn(5, generator=gen)).double().to(device).requires_grad_()
    cot = torch.randn(5, 2, generator=gen).double().to(device)

    def loss(m: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        return (torch.view_as_real(torch.polar(m, a)) * cot).sum()

    want = torch.autograd.grad(loss(mag, ang), (mag, ang))
    got = torch.autograd.grad(_compiled(loss, mag, ang), (mag, ang))
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)


# -- attention (lowering-ir decompositions: flash-for-cpu kept whole) -------------------------------

def test_flash_attention_for_cpu_returns_logsumexp() -> None:
    """Was: the second output had the attention probabilities' shape (torch's decomposition)."""
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, n, 8, generator=gen) for n in (4, 6, 6))
    op = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    got = _compiled(lambda a, b, c: op(a, b, c, is_causal=True), q, k, v)
    want = op(q, k, v, is_causal=True)
    assert [t.shape for t in got] == [t.shape for t in want]
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)


def test_sdpa_gradients_match_eager() -> None:
    """Was: gradient mismatch (the backward read the probabilities as logsumexp)."""
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, n, 8, generator=gen, dtype=torch.float64).requires_grad_() for n in (4, 6, 6))
    cot = torch.randn(2, 3, 4, 8, generator=gen, dtype=torch.float64)

    def loss(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        return (torch.nn.functional.scaled_dot_product_attention(a, b, c, is_causal=True) * cot).sum()

    want = torch.autograd.grad(loss(q, k, v), (q, k, v))
    got = torch.autograd.grad(_compiled(loss, q, k, v), (q, k, v))
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)


# -- extern results nothing reads (wrapper-codegen plan: no layout enforced) ------------------------

def test_embedding_bag_in_bfloat16() -> None:
    """Was: 'size of tensor a (5) must match the size of tensor b (0)': ATen's CPU embedding_bag
    returns an empty offset2bag in bfloat16 where the meta function says (5,)."""
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(10, 5, generator=gen).bfloat16()
    ids, offsets = torch.tensor([1, 2, 4, 5, 4]), torch.tensor([0, 2])
    fn = lambda i, o, t: torch.nn.functional.embedding_bag(i, t, o, mode="sum")  # noqa: E731
    torch.testing.assert_close(_compiled(fn, ids, offsets, w), fn(ids, offsets, w))
