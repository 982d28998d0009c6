"""Window attention (Swin's 7x7 = 49 tokens) on aligned batched products (fx-passes
`pad_matmul_strides`), end to end.

timm's window attention computes `softmax(q k^T + bias + mask) v` with plain products: 49 tokens
make the scores' rows and the second product's K unaligned. The pass pads k and v with zero rows
(in the copies that split the heads), runs the softmax over its input padded with -inf (one
reduction kernel, still: its padded columns are zeros) and hands both products aligned operands.
Against eager in fp64.

The pass rewrites only CUDA products of at least 2**27 multiply-adds. On CUDA the test uses
Swin-T's stage-1 sizes (skipped elsewhere, with that reason); the `_cpu` test lets the pass onto
small CPU products, so that CI's interpreter runs the rewritten graph through lowering, codegen
and the wrapper. In a training step, the backward's copy that splits a gradient's heads for two
products is made in its padded buffer (fx-passes `pad_owner`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import torch
from check import compiled_anew
from coil.backend import COMPILED
from coil.fx_passes.passes import pad_mm

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="CUDA only: pad_matmul_strides rewrites CUDA products of Swin's size")


class WindowAttention(torch.nn.Module):
    """timm's `WindowAttention` without SDPA: qkv projection, heads, scaled q k^T plus a bias
    per head and a shift mask per window, softmax, @ v, projection."""

    def __init__(self, dim: int, heads: int, windows: int) -> None:
        super().__init__()
        self.heads, self.windows = heads, windows
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)
        self.bias = torch.nn.Parameter(torch.randn(heads, 49, 49))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4).unbind(0)
        s = (q * (c // self.heads) ** -0.5) @ k.transpose(-2, -1) + self.bias.unsqueeze(0)
        s = s.view(-1, self.windows, self.heads, n, n) + mask.unsqueeze(1).unsqueeze(0)
        p = torch.softmax(s.view(-1, self.heads, n, n), -1)
        return self.proj((p @ v).transpose(1, 2).reshape(b, n, -1))


def _origins() -> list[list[str]]:
    return [origins for s in COMPILED for origins in s.kernel_origins]


def _run(windows: int, batch: int, dim: int, heads: int, device: str, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    model = WindowAttention(dim, heads, windows).eval()
    x = torch.randn(batch * windows, 49, dim)
    mask = torch.zeros(windows, 49, 49)
    mask[1:, :, 20:] = -100.0  # the shifted windows' mask: tokens from other regions
    with torch.no_grad():
        want = model.double()(x.double(), mask.double())
        model = model.to(device, dtype)
        got = torch.compile(model, backend="coil")(x.to(device, dtype), mask.to(device, dtype))
    return got, want


def _check_one_softmax_kernel() -> None:
    """The softmax (amax, exp, sum, div) is one kernel, which also reads the -inf padding."""
    (stats,) = COMPILED
    assert stats.eager_fallback is None and not stats.fallbacks
    softmax = [o for o in _origins() if any(op.startswith(("amax", "exp", "sum", "div")) for op in o)]
    assert len(softmax) == 1, _origins()
    assert any(op.startswith("constant_pad_nd") for op in softmax[0]), softmax


# the interpreter computes -inf - -inf in the lanes past the last row, which no store reads
@pytest.mark.filterwarnings("ignore:invalid value encountered in subtract:RuntimeWarning")
def test_window_attention_runs_on_padded_rows_cpu(pad_mm_on_cpu: None) -> None:
    got, want = _run(windows=2, batch=2, dim=64, heads=2, device="cpu", dtype=torch.float32)
    torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-4)
    _check_one_softmax_kernel()
    assert sum(op.startswith("constant_pad_nd") for o in _origins() for op in o) >= 2  # softmax, k/v


@needs_cuda
def test_swin_t_stage_1_window_attention() -> None:
    """Stage 1 of Swin-T at 224^2, batch 16: 64 windows of 49 tokens, 3 heads of 32 (3072
    products of 49 x 32 x 49, above MIN_WORK)."""
    got, want = _run(windows=64, batch=16, dim=96, heads=3, device="cuda", dtype=torch.bfloat16)
    torch.testing.assert_close(got.double().cpu(), want, rtol=3e-2, atol=3e-2)
    _check_one_softmax_kernel()


def _training_step(x: torch.Tensor, mask: torch.Tensor) -> Callable[[Any], torch.Tensor]:
    """Call the compiled model on ``x`` and back-propagate the sum of its squares."""

    def call(compiled: Any) -> torch.Tensor:
        out: torch.Tensor = compiled(x, mask)
        out.square().sum().backward()
        return out
    return call


@pytest.mark.filterwarnings("ignore:invalid value encountered in subtract:RuntimeWarning")
def test_a_backward_copy_that_is_padded_is_one_kernel(pad_mm_on_cpu: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """A training step: the backward splits a gradient's heads with a copy that two products
    read, one of them on a zero-padded operand; the copy is made in its padded buffer, one
    kernel less than with the pad a copy of its own (fx-passes `pad_owner`). Output and
    gradients against eager in fp64, both ways."""
    torch.manual_seed(0)
    model = WindowAttention(64, 2, 2)
    mask = torch.zeros(2, 49, 49)
    mask[1:, :, 20:] = -100.0
    x0 = torch.randn(4, 49, 64)
    ref = copy.deepcopy(model).double()
    xr = x0.double().requires_grad_(True)
    want = ref(xr, mask.double())
    want.square().sum().backward()
    kernels = []
    for absorbed in (True, False):
        if not absorbed:
            monkeypatch.setattr(pad_mm, "absorb_pad", lambda *args: False)
        model.zero_grad()
        x = x0.clone().requires_grad_(True)
        graphs, got = compiled_anew(model, _training_step(x, mask))
        torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(x.grad.double(), xr.grad, rtol=1e-4, atol=1e-4)
        for (name, p), (_, pr) in zip(model.named_parameters(), ref.named_parameters(), strict=True):
            torch.testing.assert_close(p.grad.double(), pr.grad, rtol=1e-4, atol=1e-4, msg=name)
        assert [g.name.split("_")[0] for g in graphs] == ["forward", "backward"]
        kernels.append([g.kernels for g in graphs])
    (fwd, bwd), (fwd_copied, bwd_copied) = kernels
    assert fwd == fwd_copied and bwd == bwd_copied - 1, kernels
