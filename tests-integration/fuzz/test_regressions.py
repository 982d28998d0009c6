"""Failures the graph fuzzer found, reduced to minimal torch functions.

A new finding starts as a strict xfail naming the bug and loses the marker with the fix; the
fixed ones stay as plain regression tests.
"""

from __future__ import annotations

import torch
from coil.knobs import knobs


def _compare(fn, *args: torch.Tensor, **tol: float) -> None:  # type: ignore[no-untyped-def]
    torch._dynamo.reset()
    expected = fn(*args)
    with knobs.override(fallback_on_error=False):
        actual = torch.compile(fn, backend="coil", fullgraph=True)(*args)
    torch.testing.assert_close(actual, expected, equal_nan=True, **tol)


def test_bool_add_is_logical_or() -> None:
    _compare(lambda x: x + x, torch.tensor([True, False, True]))


def test_fused_pointwise_over_zero_size_broadcast() -> None:
    _compare(lambda a, b: torch.relu(a + b), torch.randn(3, 0), torch.randn(2, 1, 1))


def test_reduction_over_an_empty_expanded_dim_reads_nothing() -> None:
    """A sum over a 0-size dim whose input index does not move with r loaded element 0 of an
    empty tensor (a segfault in the interpreter, an out-of-bounds read on a GPU)."""
    x = torch.rand(1).expand(0)

    def fn(x0: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        v0 = torch.sum(x0, dim=0, keepdim=True)
        return torch.amax(v0, dim=-1, keepdim=True), v0

    _compare(fn, x)


def test_log_softmax_of_an_empty_integer_tensor() -> None:
    """torch's decomposition pads the amax over the empty dim with full(-inf) in int64, which
    lowering turned into an OverflowError (a strict compile failed; eager returns an empty
    int64 tensor)."""
    _compare(lambda x: (torch.log_softmax(x, dim=-3),), torch.randint(-4, 5, (0, 3, 0)))
    _compare(lambda x: (torch.log_softmax(x, dim=0),), torch.randint(-4, 5, (0,)))  # a pad of [1]


def test_argmin_of_a_nan_row_is_its_first_nan() -> None:
    """argmin over a mean of an empty dim (NaN): eager gives index 0, coil gave 2**31 - 1 (its
    'no index' sentinel: NaN never compared smaller)."""
    _compare(lambda x: (torch.argmin(torch.mean(x, dim=0, keepdim=True), dim=0, keepdim=True),), torch.rand(0))
