"""The GEMM suite of `coil bench` (group `gemm`): matmuls with the epilogues LLM layers put on them, bf16.

Every case is a `KernelCase` (coil.bench.kernel_case), forward only, its name `gemm_<form>_<sizes>`:

- `gemm_bias_gelu_MxKxN`: `gelu(linear(x, w, b))` (an MLP's up projection and its activation);
- `gemm_residual_MxKxN`: `r + linear(x, w)` (an output projection into the residual stream);
- `gemm_bare_MxKxN`: `linear(x, w)` alone: the bare cuBLAS matmul the two above are held to
  (their `reference_case`: coil's fused time <= LIMIT x the bare matmul's eager time, the
  epilogue free);

  each at M = 8192 with (K, N) in (4096, 11008), (4096, 14336), (11008, 4096);
- `gemm_tall_skinny_65536x4096x128`: `linear(x, w, b)` with a narrow output (a classifier head
  over many tokens);
- `gemm_small_batch_16x4096x4096`: `linear(x, w, b)` over 16 rows (decoding a small batch);
- `gemm_bmm_32x2048x128x2048`: `torch.bmm(a, b)`, 32 products of 2048 x 128 by 128 x 2048.

x is (M, K), w (N, K) as nn.Linear holds it, b (N,), r (M, N); inputs are standard normal, the
weight scaled by 1 / sqrt(K) as an initialisation would, so outputs are of order one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from coil.bench.kernel_case import Args, Dims, KernelCase, randn

if TYPE_CHECKING:
    import torch

__all__ = ["GEMM", "LIMIT"]

# the epilogue is free: a fused case's coil time over its bare matmul's eager time, at most
LIMIT = 1.03
M = 8192
LLM_KN = ((4096, 11008), (4096, 14336), (11008, 4096))
_SMALL = {"M": 6, "K": 10, "N": 7}


def bias_gelu(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """An MLP's up projection and its activation: `gelu(x @ w.T + b)` (exact GELU)."""
    import torch.nn.functional as F

    return F.gelu(F.linear(x, w, b))


def residual(x: torch.Tensor, w: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """A projection added to the residual stream: `r + x @ w.T`."""
    import torch.nn.functional as F

    return r + F.linear(x, w)


def bare(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The matmul alone: `x @ w.T`."""
    import torch.nn.functional as F

    return F.linear(x, w)


def linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """A linear layer with its bias: `x @ w.T + b`."""
    import torch.nn.functional as F

    return F.linear(x, w, b)


def bmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """A batch of matmuls: `a[i] @ b[i]`."""
    import torch

    return torch.bmm(a, b)


def _x_w(d: Dims, device: str, dtype: Any) -> Args:
    return randn((d["M"], d["K"]), device, dtype), randn((d["N"], d["K"]), device, dtype, d["K"] ** -0.5)


def _make_bias(d: Dims, device: str, dtype: Any) -> Args:
    return (*_x_w(d, device, dtype), randn((d["N"],), device, dtype))


def _make_residual(d: Dims, device: str, dtype: Any) -> Args:
    return (*_x_w(d, device, dtype), randn((d["M"], d["N"]), device, dtype))


def _make_bmm(d: Dims, device: str, dtype: Any) -> Args:
    return (randn((d["B"], d["M"], d["K"]), device, dtype),
            randn((d["B"], d["K"], d["N"]), device, dtype, d["K"] ** -0.5))


def _mm_flops(d: Dims) -> float:
    return 2.0 * d.get("B", 1) * d["M"] * d["K"] * d["N"]


def _llm_cases(k: int, n: int) -> tuple[KernelCase, ...]:
    size = f"{M}x{k}x{n}"
    dims = {"M": M, "K": k, "N": n}
    return (
        KernelCase(f"gemm_bare_{size}", "gemm", f"linear(x, w), M={M} K={k} N={n}: the bare matmul", bare,
                   _x_w, dims, _SMALL, _mm_flops),
        KernelCase(f"gemm_bias_gelu_{size}", "gemm", f"gelu(linear(x, w, b)), M={M} K={k} N={n}", bias_gelu,
                   _make_bias, dims, _SMALL, _mm_flops, reference_case=f"gemm_bare_{size}", limit=LIMIT),
        KernelCase(f"gemm_residual_{size}", "gemm", f"r + linear(x, w), M={M} K={k} N={n}", residual,
                   _make_residual, dims, _SMALL, _mm_flops, reference_case=f"gemm_bare_{size}", limit=LIMIT),
    )


GEMM: tuple[KernelCase, ...] = (
    *(c for k, n in LLM_KN for c in _llm_cases(k, n)),
    KernelCase("gemm_tall_skinny_65536x4096x128", "gemm", "linear(x, w, b), M=65536 K=4096 N=128", linear,
               _make_bias, {"M": 65536, "K": 4096, "N": 128}, {"M": 40, "K": 8, "N": 3}, _mm_flops),
    KernelCase("gemm_small_batch_16x4096x4096", "gemm", "linear(x, w, b), M=16 K=4096 N=4096", linear,
               _make_bias, {"M": 16, "K": 4096, "N": 4096}, {"M": 2, "K": 12, "N": 12}, _mm_flops),
    KernelCase("gemm_bmm_32x2048x128x2048", "gemm", "bmm of 32 x (2048 x 128) by (128 x 2048)", bmm,
               _make_bmm, {"B": 32, "M": 2048, "K": 128, "N": 2048}, {"B": 3, "M": 5, "K": 4, "N": 6}, _mm_flops),
)
