"""avg_pool2d whose one window spans the input (ops/spanning_pool.py): decomposed by coil's table
into a sum and a division, forward and backward, with no ATen fallback, equal to eager's op;
windows that do not span the input stay whole, and eager's own errors are kept."""

from __future__ import annotations

from typing import Any

import coil.lowering_ir as L
import pytest
import torch

aten = torch.ops.aten

# (input shape, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override)
SPANNING: dict[str, tuple[tuple[int, ...], Any, Any, Any, bool, bool, int | None]] = {
    "kernel_equals_input": ((2, 3, 7, 6), [7, 6], [], 0, False, True, None),
    "huge_kernel_ceil_mode": ((2, 3, 7, 6), [1280, 1280], [], 0, True, True, None),  # HF EfficientNet's
    "exclude_pad_and_stride": ((2, 3, 5, 9), [9, 12], [10, 30], 0, True, False, None),
    "divisor_override": ((2, 3, 4, 4), [4, 4], [], 0, False, True, 3),
    "rank3": ((3, 11, 13), [11, 13], [], 0, False, True, None),
}


def _fallbacks(g: L.LoweredGraph) -> list[object]:
    return [op.kernel for op in g.operations if isinstance(op, L.ExternKernel) and op.fallback]


def _args(name: str) -> tuple[tuple[int, ...], tuple[Any, ...]]:
    shape, *args = SPANNING[name]
    return shape, tuple(args)


@pytest.mark.parametrize("name", sorted(SPANNING))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_spanning_window_is_a_sum_equal_to_eager(ir: Any, name: str, dtype: torch.dtype) -> None:
    shape, args = _args(name)
    torch.manual_seed(0)
    x = (torch.randn(shape) * 4).to(dtype)
    if dtype == torch.int64:
        x = torch.randint(-50, 50, shape, dtype=dtype)

    def fn(x: torch.Tensor) -> tuple[torch.Tensor]:
        return (aten.avg_pool2d(x, *args),)

    gm = ir.trace(fn, x)
    assert aten.avg_pool2d.default not in ir.targets(gm)
    g = L.lower(gm)
    assert _fallbacks(g) == []
    (got,), (want,) = ir.evaluate(g, [x]), fn(x)
    assert got.shape == want.shape and got.dtype == want.dtype
    torch.testing.assert_close(got, want, rtol=0 if dtype == torch.int64 else None,
                               atol=0 if dtype == torch.int64 else None)


@pytest.mark.parametrize("name", sorted(SPANNING))
def test_spanning_window_backward_is_native_and_equal_to_eager(ir: Any, name: str) -> None:
    shape, args = _args(name)
    torch.manual_seed(0)
    x = torch.randn(shape)
    grad = torch.randn(aten.avg_pool2d(x, *args).shape)

    def fn(grad: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor]:
        return (aten.avg_pool2d_backward(grad, x, *args),)

    g = ir.lower(fn, grad, x)
    assert _fallbacks(g) == []
    (got,), (want,) = ir.evaluate(g, [grad, x]), fn(grad, x)
    torch.testing.assert_close(got, want)


def test_windows_that_do_not_span_stay_whole(ir: Any) -> None:
    x = torch.randn(1, 2, 10, 10)
    for args in (([9, 9], [1, 1], 0), ([10, 10], [], 1), ([8, 10], [], 0)):  # 2 x 2 outputs; padded; a short side
        gm = ir.trace(_pool(args), x)
        assert aten.avg_pool2d.default in ir.targets(gm), args


def _pool(args: tuple[Any, ...]) -> Any:
    return lambda x: (aten.avg_pool2d(x, *args),)


def test_eagers_output_size_error_is_kept(ir: Any) -> None:
    """A kernel past the input without ceil_mode has no output; eager raises, and so does the trace."""
    x = torch.randn(1, 2, 7, 6)
    with pytest.raises(RuntimeError, match="Output size is too small"):
        ir.trace(lambda x: (aten.avg_pool2d(x, [10, 10]),), x)
