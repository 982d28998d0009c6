"""The backward of weight normalisation, `_weight_norm_interface_backward`, as pointwise and sum ops.

`torch._weight_norm(v, g, dim)` (nn.utils.weight_norm and its parametrization: Wav2Vec2's and
HuBERT's positional convolution, audio vocoders) calls `_weight_norm_interface`, whose forward
torch's table decomposes but whose autograd formula is its own fused op,
`_weight_norm_interface_backward(grad_w, v, g, norms, dim)`, which has no decomposition and would
run as an ATen fallback. With w = v * g / n and n = ||v|| over every dim but `dim` (all dims
when `dim` is -1), kept as size-1 dims:

    grad_g = sum(grad_w * v) / n
    grad_v = (g / n) * grad_w - (g * sum(grad_w * v) / n**3) * v

the sums over the same dims as the norm. Computed in float32 for half types (as eager's kernel
accumulates), each result rounded once to its input's dtype.
"""

from __future__ import annotations

import torch
from coil.lowering_ir.ops.common import upcast_compute

aten = torch.ops.aten


def weight_norm_interface_backward(grad_w: torch.Tensor, saved_v: torch.Tensor, saved_g: torch.Tensor,
                                   saved_norms: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(grad_v, grad_g) of `w = v * g / ||v||` (module docstring)."""
    ct = upcast_compute(saved_v.dtype)
    dims = [i for i in range(saved_v.dim()) if i != dim]
    gw, v, g, n = (t.to(ct) for t in (grad_w, saved_v, saved_g, saved_norms))
    dot = (gw * v).sum(dims, keepdim=True) if dims else gw * v
    grad_g = dot / n
    grad_v = (g / n) * gw - (g * dot / (n * n * n)) * v
    return grad_v.to(saved_v.dtype), grad_g.to(saved_g.dtype).reshape(saved_g.shape)
