"""Native lowerings of cat, padding and indexing ops (masked and indirect loads) against eager."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from coil.backend import COMPILED
from coil.knobs import knobs

CASES: dict[str, tuple[Callable[..., torch.Tensor], Callable[[torch.device], tuple[torch.Tensor, ...]]]] = {
    "cat": (lambda x, y: torch.cat([x, y * 2], dim=1) + 1, lambda d: (torch.randn(4, 6, device=d), torch.randn(4, 3, device=d))),
    "cat_dim0": (lambda x: torch.cat([x, x.sin()], 0), lambda d: (torch.randn(4, 6, device=d),)),
    "pad": (lambda x: torch.nn.functional.pad(x, (1, 2, 0, 1), value=0.5), lambda d: (torch.randn(4, 6, device=d),)),
    "crop": (lambda x: torch.nn.functional.pad(x, (-1, 1)), lambda d: (torch.randn(4, 6, device=d),)),
    "index_select": (lambda x, i: x.index_select(0, i) * 2,
                     lambda d: (torch.randn(4, 6, device=d), torch.tensor([2, 0, 1, 3], device=d))),
    "gather": (lambda x, i: torch.gather(x, 1, i) + 1,
               lambda d: (torch.randn(4, 6, device=d), torch.randint(0, 6, (4, 3), device=d))),
    "index_negative": (lambda x, i: x[i] + 1, lambda d: (torch.randn(4, 6, device=d), torch.tensor([2, 0, -1, 3], device=d))),
    "index_inner": (lambda x, i: x[:, i], lambda d: (torch.randn(4, 6, device=d), torch.tensor([5, 0, 2], device=d))),
    "index_two": (lambda x, i, j: x[i, j],
                  lambda d: (torch.randn(4, 6, device=d), torch.tensor([1, 3], device=d), torch.tensor([0, 5], device=d))),
    "embedding": (lambda w, ids: torch.nn.functional.embedding(ids, w) * 3,
                  lambda d: (torch.randn(10, 5, device=d), torch.tensor([[1, 2, 9], [0, 0, 3]], device=d))),
    "index_put_accumulate": (lambda x, i, v: torch.index_put(x, (i,), v, accumulate=True) * 2,
                             lambda d: (torch.randn(6, 5, device=d), torch.tensor([0, 2, 2, 5], device=d),
                                        torch.randn(4, 5, device=d))),
    "scatter_add": (lambda x, i: torch.zeros(3, 5, device=x.device).scatter_add(0, i, x),
                    lambda d: (torch.randn(2, 5, device=d), torch.tensor([[0, 1, 2, 0, 0], [2, 2, 1, 0, 1]], device=d))),
    "scatter_value": (lambda x, i: x.scatter(1, i, 7.0),
                      lambda d: (torch.randn(2, 5, device=d), torch.tensor([[1], [3]], device=d))),
}


def test_embedding_backward_is_native(device: torch.device) -> None:
    torch.manual_seed(0)
    emb = torch.nn.Embedding(10, 4).to(device)
    ids = torch.tensor([[1, 2, 1], [9, 0, 1]], device=device)  # repeated ids accumulate
    with knobs.override(fallback_on_error=False):
        torch.compile(emb, backend="coil")(ids).square().sum().backward()
    assert emb.weight.grad is not None
    got = emb.weight.grad.clone()
    emb.weight.grad = None
    emb(ids).square().sum().backward()
    torch.testing.assert_close(got, emb.weight.grad)
    assert [f for s in COMPILED for f in s.fallbacks] == []


@pytest.mark.parametrize("name", sorted(CASES))
def test_native_and_equal_to_eager(name: str, device: torch.device) -> None:
    fn, make = CASES[name]
    args = make(device)
    with knobs.override(fallback_on_error=False):
        out = torch.compile(fn, backend="coil")(*args)
    torch.testing.assert_close(out, fn(*args))
    assert [f for s in COMPILED for f in s.fallbacks] == []
    assert sum(s.kernels for s in COMPILED) >= 1


HALF_ACCUMULATING: dict[str, Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "index_put": lambda x, i, v: torch.index_put(x, (i,), v, accumulate=True),
    "index_add": lambda x, i, v: x.index_add(0, i, v),
    "scatter_add": lambda x, i, v: x.scatter_add(0, i[:, None].expand_as(v), v),
    "put": lambda x, i, v: x.put(i * x.shape[1], v[:, 0], accumulate=True),
}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("name", sorted(HALF_ACCUMULATING))
def test_half_precision_accumulation_is_native_and_rounded_once(name: str, dtype: torch.dtype,
                                                                 device: torch.device) -> None:
    """Accumulating scatters in a half type (an embedding's or a gather's backward under autocast)
    compile natively: they accumulate in float32 and round once, so every element is within one
    rounding of the exact (float64) sum, never further from it than eager's result."""
    fn = HALF_ACCUMULATING[name]
    torch.manual_seed(0)
    x = torch.randn(6, 5, device=device).to(dtype)
    i = torch.tensor([0, 2, 2, 5, 2, 2, 0, 2], device=device)  # positions 0 and 2 take several adds
    v = (torch.randn(8, 5, device=device) * 3).to(dtype)
    exact = fn(x.double(), i, v.double())
    got = torch.compile(fn, backend="coil")(x, i, v)
    assert got.dtype == dtype
    assert [f for s in COMPILED for f in s.fallbacks] == []
    one_rounding = exact.to(dtype).double()
    ulp = (one_rounding.abs() * torch.finfo(dtype).eps).clamp_min(torch.finfo(dtype).tiny)
    assert bool(((got.double() - exact).abs() <= ulp).all()), (got, exact)
    eager_err = (fn(x, i, v).double() - exact).abs()
    assert bool(((got.double() - exact).abs() <= eager_err + ulp / 2).all())
