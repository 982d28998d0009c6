"""avg_pool2d whose one window spans the whole input: a sum over the two spatial dims.

Global average pooling is often written as `nn.AvgPool2d(k)` with k at least the feature map's
size (HF's EfficientNet: `AvgPool2d(hidden_dim, ceil_mode=True)`, k = 1280 over a 7 x 7 map).
The window is then far above what the pooling lowering unrolls (pool_common.MAX_WINDOW), and the
op would run as an ATen fallback. When, on both spatial axes, the padding is 0, the kernel covers
the input and the output has one position, that output is the input's sum divided by eager's
divisor: `divisor_override` when given, else the input's H * W (the one window, clipped to the
input, holds every element; with `count_include_pad` it is clipped to the padded input, which
is the same input when the padding is 0). coil's table decomposes such calls, forward and
backward, into a sum and a division (a reduction coil fuses) and a broadcast of the gradient;
every other call returns NotImplemented and stays whole.

Rounding follows eager's kernels: floats sum in their compute type (float32 for half types) and
round once after the division; integers sum in int64 and divide truncating. The gradient is
`grad / divisor` at every input position, in the input's memory format.
"""

from __future__ import annotations

from typing import Any

import torch
from coil.lowering_ir.errors import Unsupported
from coil.lowering_ir.ops.common import upcast_compute
from coil.lowering_ir.ops.pool_common import pair


def _out_size(n: int, k: int, s: int, ceil_mode: bool) -> int:
    """Eager's pooled length along one axis, padding 0 and dilation 1."""
    out = (n - k + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (out - 1) * s >= n:  # the last window must start inside the input
        out -= 1
    return out


def _spans(x: torch.Tensor, kernel_size: Any, stride: Any, padding: Any, ceil_mode: bool) -> bool:
    """Whether the one window of `avg_pool2d(x, ...)` spans all of x's last two dims."""
    try:
        k = pair(kernel_size, None, "kernel_size")
        s = pair(stride, k, "stride")  # [] (the default): the kernel size
        p = pair(padding, None, "padding")
    except Unsupported:
        return False
    sizes = tuple(x.shape[-2:])
    if x.dim() not in (3, 4) or not all(isinstance(n, int) and n > 0 for n in sizes) or p != (0, 0):
        return False
    return all(kk >= n and ss >= 1 and _out_size(n, kk, ss, ceil_mode) == 1
               for n, kk, ss in zip(sizes, k, s, strict=True))


def _divisor(x: torch.Tensor, divisor_override: Any) -> int | None:
    if divisor_override is None:
        return int(x.shape[-2] * x.shape[-1])
    return divisor_override if isinstance(divisor_override, int) and divisor_override != 0 else None


def avg_pool2d_spanning(self: torch.Tensor, kernel_size: Any, stride: Any = (), padding: Any = 0,
                        ceil_mode: bool = False, count_include_pad: bool = True,
                        divisor_override: Any = None) -> Any:
    """The decomposition of `aten.avg_pool2d` in coil's table (module docstring); parameters as
    in the ATen schema. NotImplemented unless the window spans the input."""
    del count_include_pad  # the same divisor either way when the padding is 0
    if not _spans(self, kernel_size, stride, padding, ceil_mode) or self.dtype == torch.bool or self.is_complex():
        return NotImplemented
    div = _divisor(self, divisor_override)
    if div is None:
        return NotImplemented
    if not self.dtype.is_floating_point:
        total = self.sum(dim=(-2, -1), keepdim=True, dtype=torch.int64)
        return torch.div(total, div, rounding_mode="trunc").to(self.dtype)
    total = self.to(upcast_compute(self.dtype)).sum(dim=(-2, -1), keepdim=True)
    return (total / div).to(self.dtype)


def avg_pool2d_backward_spanning(grad_output: torch.Tensor, self: torch.Tensor, kernel_size: Any, stride: Any,
                                 padding: Any, ceil_mode: bool, count_include_pad: bool,
                                 divisor_override: Any) -> Any:
    """The decomposition of `aten.avg_pool2d_backward` in coil's table (module docstring).
    NotImplemented unless the forward's window spans the input."""
    del count_include_pad
    if not (_spans(self, kernel_size, stride, padding, ceil_mode) and grad_output.dtype.is_floating_point):
        return NotImplemented
    div = _divisor(self, divisor_override)
    if div is None:
        return NotImplemented
    share = (grad_output.to(upcast_compute(grad_output.dtype)) / div).to(grad_output.dtype)
    return torch.ones_like(self, dtype=grad_output.dtype) * share
