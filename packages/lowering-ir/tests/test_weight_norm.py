"""coil's decomposition of `_weight_norm_interface_backward` against two oracles: autograd of
w = v * g / ||v|| in float64, and ATen's own fused backward kernel."""

from __future__ import annotations

import pytest
import torch
from coil.lowering_ir import decomposition_table

aten = torch.ops.aten

# (v's shape, dim, g's shape): the fused op serves dim 0 and the last dim only
CASES = [((6, 4, 3), 0, (6, 1, 1)), ((6, 4, 3), 2, (1, 1, 3)), ((5, 7), 1, (1, 7)), ((16, 8, 5), 0, (16, 1, 1)),
         ((8,), 0, (8,))]


@pytest.mark.parametrize(("shape", "dim", "g_shape"), CASES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_weight_norm_backward_decomposition(shape: tuple[int, ...], dim: int, g_shape: tuple[int, ...],
                                            dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    v, g, grad_w = torch.randn(shape, dtype=dtype), torch.randn(g_shape, dtype=dtype), torch.randn(shape, dtype=dtype)
    _, norms = aten._weight_norm_interface(v, g, dim)
    decomposed = decomposition_table()[aten._weight_norm_interface_backward.default]
    got = decomposed(grad_w, v, g, norms, dim)

    v64, g64 = v.double().requires_grad_(), g.double().requires_grad_()
    dims = [i for i in range(v.dim()) if i != dim]
    n64 = v64.norm(2, dims, keepdim=True) if dims else v64.abs()
    w64 = v64 * g64 / n64
    want = torch.autograd.grad(w64, (v64, g64), grad_w.double())
    aten_kernel = aten._weight_norm_interface_backward(grad_w, v, g, norms, dim)

    tol = {"atol": 1e-5, "rtol": 1e-4} if dtype == torch.float32 else {}
    for a, w, k in zip(got, want, aten_kernel, strict=True):
        assert (a.shape, a.dtype) == (k.shape, k.dtype)
        torch.testing.assert_close(a.double(), w, **tol)
        torch.testing.assert_close(a, k, **tol)
