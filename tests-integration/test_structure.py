"""Structure: what ran as Triton kernels, and that fusion made fewer kernels than ops."""

from __future__ import annotations

import torch
from check import run_both
from coil.backend import COMPILED
from models import MLP


def test_mlp_bias_gelu_and_layernorm_are_triton_kernels(device: torch.device) -> None:
    torch.manual_seed(0)
    run_both(MLP().to(device), torch.randn(8, 16, device=device), train=True)
    fwd = next(s for s in COMPILED if s.name.startswith("forward"))
    assert fwd.fallbacks == [], fwd.fallbacks
    in_kernels = {o for origins in fwd.kernel_origins for o in origins}
    # GELU decomposes to erf and muls; LayerNorm to var_mean, rsqrt, sub, mul, add; bias add: add
    assert "erf" in in_kernels
    assert "var_mean" in in_kernels and "rsqrt" in in_kernels
    assert any(o.startswith("add") for o in in_kernels)
    # only the two matmuls are extern calls
    assert fwd.externs == 2
    assert "aten.native_layer_norm" not in fwd.wrapper_source and "gelu" not in fwd.wrapper_source


def test_fusion_makes_fewer_kernels_than_ops(device: torch.device) -> None:
    torch.manual_seed(0)
    run_both(MLP().to(device), torch.randn(8, 16, device=device), train=True)
    for s in COMPILED:
        assert s.ir_ops > 0
        assert s.kernels < s.ir_ops, (s.name, s.kernels, s.ir_ops)
    fwd = next(s for s in COMPILED if s.name.startswith("forward"))
    # bias + GELU + LayerNorm of the first layer, and the bias of the second: at most 2 kernels
    assert fwd.kernels <= 2, fwd.kernel_origins
