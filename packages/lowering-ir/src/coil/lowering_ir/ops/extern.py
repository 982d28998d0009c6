"""Extern kernels: matrix products and convolutions run through ATen (cuBLAS/cuDNN), by design.

These are not fallbacks: coil calls the vendor library on purpose. `copy_` into a graph input
(the AOTAutograd mutation epilogue) is an extern that mutates that input. Operators registered
at run time by another package (coil's `coil::attention` and its backward, which lowering-ir
cannot import) join them through `register_externs`.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx
from coil.lowering_ir.lowerer import Lowerer
from coil.lowering_ir.registry import register

aten = torch.ops.aten

EXTERN_NAMES = [
    "mm", "bmm", "addmm", "baddbmm", "convolution", "convolution_backward",
    "_scaled_dot_product_efficient_attention", "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_efficient_attention_backward",
    "_scaled_dot_product_flash_attention_backward",
    "_scaled_dot_product_flash_attention_for_cpu_backward",
    "_scaled_dot_product_cudnn_attention_backward",
]
# ops missing from the installed torch are skipped
EXTERN_OPS = [getattr(aten, n) for n in EXTERN_NAMES if hasattr(aten, n)]


@register(*EXTERN_OPS)
def extern(lw: Lowerer, node: torch.fx.Node, *args: Any, **kwargs: Any) -> Any:
    return lw.extern(node.target, args, kwargs, fallback=False)


def register_externs(*ops: Any) -> None:
    """Make each op (an `OpOverload`, or an `OpOverloadPacket`: all its overloads) an intended
    extern: lowered as one call of the op, results laid out as its node's `meta["val"]`, not
    counted as a fallback. Idempotent; a later registration of the same op replaces this one."""
    register(*ops)(extern)


@register(aten.copy_.default)
def copy_(lw: Lowerer, node: torch.fx.Node, dst: Any, src: Any, non_blocking: bool = False) -> Any:
    lw.extern(aten.copy_.default, (dst, src), {}, fallback=False, mutates=(dst.storage.name,))
    return dst
