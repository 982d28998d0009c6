"""Variants of one generated kernel for autotuning: the same source under other launch configurations.

A kernel's text depends on its reduction strategy (a persistent block, or a loop over r) but
never on its block sizes or warps: XBLOCK and RBLOCK are `tl.constexpr` parameters, and the grid
(`ceiling(xnumel / XBLOCK)`) is computed by the wrapper. So every candidate of `config.candidates`
(which keeps the strategy) is the default `KernelSource` with other `constexprs`, `num_warps` and
`grid`; nothing is regenerated. coil.backend times them (coil.runtime.autotune) and builds the
wrapper from the one it keeps. GEMM template kernels (strategy "matmul") likewise: their
candidates are `matmul_config.shape_configs` (tiles, warps, stages), each the same source with
other constexprs, warps, stages and grid (`with_matmul_config`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

import sympy
import torch
from coil.lowering_ir import Buffer, Expr
from coil.scheduler import KernelGroup
from coil.triton_codegen.config import (
    STRATEGIES,
    CodegenOptions,
    KernelConfig,
    candidates,
    looped_alternatives,
)
from coil.triton_codegen.kernel import generate
from coil.triton_codegen.kernel_source import KernelSource
from coil.triton_codegen.matmul_config import config_of, shape_configs, with_matmul_config

TUNED_STRATEGIES = ("persistent", "looped", "outer")


def default_config(ks: KernelSource) -> KernelConfig:
    """The launch configuration `ks` was generated with."""
    return KernelConfig(ks.strategy, ks.constexprs["XBLOCK"], ks.constexprs.get("RBLOCK", 1), ks.num_warps)


def with_config(ks: KernelSource, cfg: KernelConfig) -> KernelSource:
    """`ks` launched with `cfg` (same strategy: the source is unchanged): its constexprs, warps and
    the grid for `cfg.xblock`.

    Raises ValueError when `cfg` has another strategy than `ks` (that would need other text).
    """
    if cfg.strategy != ks.strategy:
        raise ValueError(f"{ks.name}: a {cfg.strategy} configuration for a {ks.strategy} kernel")
    consts = {"XBLOCK": cfg.xblock}
    if "RBLOCK" in ks.constexprs:
        consts["RBLOCK"] = cfg.rblock
    xnumel: Expr = sympy.sympify(ks.size_args[0])
    return dataclasses.replace(ks, constexprs=consts, num_warps=cfg.num_warps,
                               grid=sympy.ceiling(xnumel / cfg.xblock))


def _size(e: object, hints: dict[sympy.Symbol, int] | None) -> int:
    """A size argument at `hints` (a size without a hint counts as 2**20)."""
    s = sympy.sympify(sympy.sympify(e).xreplace(hints or {}))  # a bare symbol -> int
    return int(s) if isinstance(s, sympy.Integer) else 1 << 20


def _sizes(ks: KernelSource, hints: dict[sympy.Symbol, int] | None) -> tuple[int, int]:
    """`ks`'s xnumel and rnumel at `hints` (`_size`)."""
    return _size(ks.size_args[0], hints), _size(ks.size_args[1], hints)


def _interchangeable(other: KernelSource | None, ks: KernelSource, strategy: str) -> bool:
    """Whether `other`, generated again for `ks`'s group, is a `strategy` kernel the wrapper can
    launch in `ks`'s place: the same name, pointer arguments and size arguments, and an RBLOCK."""
    return (other is not None and other.strategy == strategy and other.name == ks.name
            and other.pointer_args == ks.pointer_args and other.size_args == ks.size_args
            and "RBLOCK" in other.constexprs)


def variants(ks: KernelSource, target: str, hints: dict[sympy.Symbol, int] | None = None) -> list[KernelSource]:
    """`ks` first, then one `KernelSource` per other candidate configuration (`config.candidates`).

    Reduction kernels (persistent, looped or outer, scans included) and, on CUDA, pointwise
    kernels with the 1024-wide default have candidates; any other kernel gives `[ks]`. `hints`
    (the graph's size hints) stand in for symbolic xnumel and rnumel when candidates are
    filtered; a variant is valid wherever `ks` is (a persistent one keeps `ks`'s RBLOCK, so it
    covers the same rows; a loop covers any row; a pointwise one masks its last block).
    A GEMM template kernel (`ks.matmul` set) has its `shape_configs` for `target` (on CUDA the
    default and up to 7 other tiles; on the interpreter none besides the default); every tile
    masks its edges, so each is valid wherever `ks` is.
    """
    if ks.matmul is not None:
        default = config_of(ks)
        others = [c for c in shape_configs(ks.matmul, target, hints) if c != default]
        return [ks] + [with_matmul_config(ks, c) for c in others]
    if ks.strategy == "pointwise" and "RBLOCK" not in ks.constexprs and ks.size_args:
        configs = candidates(default_config(ks), _size(ks.size_args[0], hints), 1, target, ks.plain_loads)
        return [ks] + [with_config(ks, cfg) for cfg in configs[1:]]
    if ks.strategy not in TUNED_STRATEGIES or "RBLOCK" not in ks.constexprs or len(ks.size_args) < 2:
        return [ks]
    xnumel, rnumel = _sizes(ks, hints)
    configs = candidates(default_config(ks), xnumel, rnumel, target)
    return [ks] + [with_config(ks, cfg) for cfg in configs[1:]]


def other_strategy(ks: KernelSource, make_loop: Callable[[], KernelSource | None], target: str,
                   hints: dict[sympy.Symbol, int] | None = None) -> list[KernelSource]:
    """Candidates of another reduction strategy for `ks`: `make_loop()` generates the same kernel
    group as a loop over r (`generate(..., strategy="looped")`; None: it cannot), launched under
    each of `config.looped_alternatives`. `make_loop` is called only when there are any (a graph
    has hundreds of small persistent kernels). Empty when there are none, or when the loop is not
    a loop with `ks`'s name, pointer arguments and size arguments (the two must be
    interchangeable in the wrapper)."""
    if ks.strategy != "persistent" or "RBLOCK" not in ks.constexprs or len(ks.size_args) < 2:
        return []
    configs = looped_alternatives(default_config(ks), *_sizes(ks, hints), target)
    if not configs:
        return []
    loop = make_loop()
    if loop is None or not _interchangeable(loop, ks, "looped"):
        return []
    return [with_config(loop, cfg) for cfg in configs]


def reread_alternative(ks: KernelSource, make_reread: Callable[[], KernelSource | None], target: str
                       ) -> list[KernelSource]:
    """A persistent kernel's alternative that reads its rows again after its last reduction:
    `make_reread()` generates the same group with `generate(..., reread=True)` (None: it cannot),
    launched with `ks`'s configuration. Empty unless `ks` is a persistent reduction on CUDA and
    the other text differs (a kernel with nothing to read again after its reductions generates
    the same text) with the same name, pointer and size arguments (interchangeable in the
    wrapper). The same results bit for bit; only which is faster differs (docs/perf.md,
    "Codegen, runtime and lowering choices": up to 1 % either way on the bench's norms)."""
    if ks.strategy != "persistent" or "RBLOCK" not in ks.constexprs or len(ks.size_args) < 2 or target != "cuda":
        return []
    other = make_reread()
    if other is None or other.source == ks.source or not _interchangeable(other, ks, "persistent"):
        return []
    return [with_config(other, default_config(ks))]


def generate_like(ks: KernelSource, group: KernelGroup, buffers: dict[str, Buffer], target: str,
                  hints: dict[sympy.Symbol, int] | None = None, options: CodegenOptions | None = None, *,
                  indirect: Mapping[str, tuple[int, torch.dtype]] | None = None, table: str | None = None,
                  name: str | None = None) -> KernelSource:
    """`group` generated again as `ks` (a kernel of it, possibly a variant the autotuner kept)
    was: its strategy and `reread`, launched with its configuration (constexprs, warps, stages, grid),
    now with `indirect`, `table` and `name` (see `generate`). The text depends on the strategy,
    not on the block sizes, so only what `indirect` asks for differs from `ks`'s; `hints` and
    `options` must be those `ks` was generated with."""
    strategy = ks.strategy if ks.strategy in STRATEGIES else "auto"  # "pointwise": no reduction strategy
    new = generate(group, buffers, target, strategy, hints, options, reread=ks.reread, indirect=indirect,
                   table=table, name=name)
    return dataclasses.replace(new, constexprs=dict(ks.constexprs), num_warps=ks.num_warps, grid=ks.grid,
                               num_stages=ks.num_stages)
