"""`KernelSource`: a generated kernel module and the facts its launch needs."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from coil.lowering_ir import Expr


@dataclass(frozen=True)
class MatmulShape:
    """The product a GEMM template kernel computes: `batch` x (`m` x `k`) @ (`k` x `n`) in
    `dtype` (sizes as sympy expressions of the graph's sizes; `batch` is 1 for mm/addmm)."""

    batch: Expr
    m: Expr
    n: Expr
    k: Expr
    dtype: torch.dtype


@dataclass(frozen=True)
class KernelSource:
    """A generated kernel and how to launch it.

    `pointer_args`: storage buffer names passed as pointers, in signature order.
    `size_args`: integer arguments (xnumel[, rnumel], then size symbols) as sympy expressions of
    graph sizes; a GEMM template's are (xnumel, K, ...), K being its reduction length.
    `grid`: number of programs along axis 0 (sympy). `constexprs`: block sizes.
    `debug`: the source holds `tl.device_assert`s (CodegenOptions.debug_asserts): compile it in
    Triton's debug mode, without which they are compiled out.
    `plain_loads`: every load reads a floating dtype at an affine index under the block's mask
    alone (no gathered index, no mask computed from data) and nothing is scattered: the
    autotuner's check on synthetic standard-normal data exercises every lane's path
    (`config.candidates` offers such kernels more configurations).
    `reread`: generated with `generate(..., reread=True)` (what generating it again, e.g. with
    a table of addresses, must ask for; `variants.generate_like`).
    `num_stages`: Triton's software-pipelining stages (1 for every kernel but GEMM templates).
    `matmul`: for a GEMM template kernel (strategy "matmul", matmul.py), the product it computes
    (its grid and candidate configurations follow from it); None for every other kernel.
    """

    name: str
    source: str
    pointer_args: tuple[str, ...]
    size_args: tuple[Expr, ...]
    constexprs: dict[str, int]
    grid: Expr
    num_warps: int
    strategy: str
    origins: tuple[str, ...]
    stores: tuple[str, ...]
    debug: bool = False
    plain_loads: bool = False
    reread: bool = False
    num_stages: int = 1
    matmul: MatmulShape | None = None
