"""`KernelSource`: a generated kernel module and the facts its launch needs."""

from __future__ import annotations

from dataclasses import dataclass

from coil.lowering_ir import Expr


@dataclass(frozen=True)
class KernelSource:
    """A generated kernel and how to launch it.

    `pointer_args`: storage buffer names passed as pointers, in signature order.
    `size_args`: integer arguments (xnumel[, rnumel]) as sympy expressions of graph sizes.
    `grid`: number of programs along axis 0 (sympy). `constexprs`: block sizes.
    `debug`: the source holds `tl.device_assert`s (CodegenOptions.debug_asserts): compile it in
    Triton's debug mode, without which they are compiled out.
    `plain_loads`: every load reads a floating dtype at an affine index under the block's mask
    alone (no gathered index, no mask computed from data) and nothing is scattered: the
    autotuner's check on synthetic standard-normal data exercises every lane's path
    (`config.candidates` offers such kernels more configurations).
    `reread`: generated with `generate(..., reread=True)` (what generating it again, e.g. with
    a table of addresses, must ask for; `variants.generate_like`).
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
