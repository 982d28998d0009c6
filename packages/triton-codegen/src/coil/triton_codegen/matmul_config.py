"""Launch configurations of the GEMM template (matmul.py): tile sizes, warps, pipeline stages.

A template kernel's text never depends on its configuration: BLOCK_M, BLOCK_N, BLOCK_K and
GROUP_M are `tl.constexpr` parameters and the grid is computed from them, so every candidate of
`matmul_configs` launches the same source (`with_matmul_config`), which is what the autotuner
times (`variants.variants`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import sympy
import torch
from coil.lowering_ir import Expr
from coil.scheduler import KernelGroup, matmul_operands, matmul_product
from coil.triton_codegen.config import next_pow2
from coil.triton_codegen.kernel_source import KernelSource, MatmulShape

# tl.dot needs every tile dim to be at least this
MIN_BLOCK = 16
# CUDA tiles (BLOCK_M, BLOCK_N, BLOCK_K, warps, stages) timed for a template kernel, for 16-bit
# inputs: the square and wide tiles of large products (Hopper: 128x128 or 128x256 with 64-deep
# K steps, 3-4 stages of shared memory), the medium ones for products of fewer tiles than SMs,
# and small-M tiles for decode-like products (a few rows against a wide weight)
CUDA_CANDIDATES = (
    (128, 128, 64, 4, 4), (128, 128, 64, 8, 3), (128, 256, 64, 8, 3), (256, 128, 64, 8, 3),
    (64, 128, 64, 4, 4), (128, 64, 64, 4, 4), (64, 64, 64, 4, 4),
    (16, 128, 128, 4, 4), (32, 128, 64, 4, 4), (64, 256, 64, 8, 3),
)
MAX_CUDA_CANDIDATES = 8
# programs below which the CUDA default takes smaller tiles: about one per SM of a Hopper GPU
TARGET_PROGRAMS = 128
GROUP_M_CUDA = 8
# the interpreter's cost is per operation: big tiles, but small enough that the tests' products
# (tens of rows and columns) take several tiles with ragged edges and several K steps
INTERPRET_BLOCK = 32
INTERPRET_BLOCK_K = 16
GROUP_M_INTERPRET = 2


@dataclass(frozen=True)
class MatmulConfig:
    """One launch configuration of a GEMM template kernel: the tile (`block_m` x `block_n`
    outputs, `block_k` deep steps over K), `group_m` (rows of tiles a band of programs sweeps
    column by column, for L2 reuse), warps and software-pipelining stages. Validated: blocks are
    powers of two of at least MIN_BLOCK, group_m, warps and stages positive."""

    block_m: int
    block_n: int
    block_k: int
    group_m: int
    num_warps: int
    num_stages: int

    def __post_init__(self) -> None:
        for name in ("block_m", "block_n", "block_k"):
            v = getattr(self, name)
            if v < MIN_BLOCK or v & (v - 1):
                raise ValueError(f"MatmulConfig.{name}={v}: a power of two >= {MIN_BLOCK}")
        if self.group_m < 1 or self.num_warps < 1 or self.num_stages < 1:
            raise ValueError(f"MatmulConfig {self}: group_m, num_warps and num_stages must be positive")

    @property
    def constexprs(self) -> dict[str, int]:
        return {"BLOCK_M": self.block_m, "BLOCK_N": self.block_n, "BLOCK_K": self.block_k, "GROUP_M": self.group_m}


def group_shape(group: KernelGroup) -> MatmulShape:
    """The product's sizes and dtype of a matmul group (ValueError for any other group)."""
    pm = matmul_product(group)
    ops = matmul_operands(pm.extern) if pm is not None else None
    if ops is None:
        raise ValueError(f"{group.name} is not a matmul group")
    return MatmulShape(ops.batch, ops.m, ops.n, ops.k, ops.out.layout.dtype)


def _hint(e: Expr, hints: dict[sympy.Symbol, int] | None) -> int:
    """`e` at the size hints (a size without one counts as 2**20)."""
    v = sympy.sympify(sympy.sympify(e).xreplace(hints or {}))
    return int(v) if isinstance(v, sympy.Integer) else 1 << 20


def _fit(size: int, block: int) -> int:
    """`block` shrunk to the next power of two of `size` (at least MIN_BLOCK): a wider tile only
    masks lanes off."""
    return max(MIN_BLOCK, min(block, next_pow2(size)))


def shape_configs(shape: MatmulShape, target: str, hints: dict[sympy.Symbol, int] | None = None
                  ) -> list[MatmulConfig]:
    """The default configuration first, then (on CUDA) the other candidates worth timing.

    Interpreter: one configuration, INTERPRET_BLOCK square tiles (fitted to M and N),
    INTERPRET_BLOCK_K steps, GROUP_M 2. CUDA: the default is 128x128x64 with 4 warps and 4
    stages, halved in M or N (the larger first, down to 64) while the product has fewer than
    TARGET_PROGRAMS tiles, and fitted to small M or N; candidates are CUDA_CANDIDATES fitted
    the same way, deduplicated, at most MAX_CUDA_CANDIDATES in all. float32 inputs take half as
    deep K steps (32 for 64: their tiles hold twice the bytes, and 4 stages of 128x64 fp32
    tiles would not fit in shared memory).
    """
    b, m, n, k = (_hint(e, hints) for e in (shape.batch, shape.m, shape.n, shape.k))
    if target != "cuda":
        return [MatmulConfig(_fit(m, INTERPRET_BLOCK), _fit(n, INTERPRET_BLOCK), _fit(k, INTERPRET_BLOCK_K),
                             GROUP_M_INTERPRET, 4, 1)]
    deep = 1 if shape.dtype in (torch.float16, torch.bfloat16) else 2

    def make(bm: int, bn: int, bk: int, w: int, s: int) -> MatmulConfig:
        return MatmulConfig(_fit(m, bm), _fit(n, bn), _fit(k, max(MIN_BLOCK, bk // deep)), GROUP_M_CUDA, w, s)

    bm, bn = 128, 128
    while b * -(-m // bm) * -(-n // bn) < TARGET_PROGRAMS and max(bm, bn) > 64:
        if bm >= bn:
            bm //= 2
        else:
            bn //= 2
    out = [make(bm, bn, 64, 4, 4)]
    for cand in CUDA_CANDIDATES:
        cfg = make(*cand)
        if cfg not in out:
            out.append(cfg)
    return out[:MAX_CUDA_CANDIDATES]


def matmul_configs(group: KernelGroup, target: str, hints: dict[sympy.Symbol, int] | None = None
                   ) -> list[MatmulConfig]:
    """`shape_configs` of a matmul group's product (the default first)."""
    return shape_configs(group_shape(group), target, hints)


def matmul_grid(shape: MatmulShape, cfg: MatmulConfig) -> Expr:
    """Programs of a template launch: batch x tiles along M x tiles along N."""
    return sympy.sympify(shape.batch * sympy.ceiling(shape.m / cfg.block_m) * sympy.ceiling(shape.n / cfg.block_n))


def config_of(ks: KernelSource) -> MatmulConfig:
    """The configuration a template kernel `ks` launches with."""
    c = ks.constexprs
    return MatmulConfig(c["BLOCK_M"], c["BLOCK_N"], c["BLOCK_K"], c["GROUP_M"], ks.num_warps, ks.num_stages)


def with_matmul_config(ks: KernelSource, cfg: MatmulConfig) -> KernelSource:
    """Template kernel `ks` launched with `cfg`: the same source, its constexprs, warps, stages
    and grid. ValueError for a kernel that is not a template."""
    if ks.matmul is None:
        raise ValueError(f"{ks.name} is not a matmul template kernel")
    return dataclasses.replace(ks, constexprs=cfg.constexprs, num_warps=cfg.num_warps, num_stages=cfg.num_stages,
                               grid=matmul_grid(ks.matmul, cfg))
