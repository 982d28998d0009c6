"""coil's decomposition table, handed to AOTAutograd.

Core ATen decompositions, plus the composite ops coil would rather see as pointwise and reduction
pieces it can fuse (layer norm, softmax, GELU, batch norm, ...), and composites that would
otherwise run as ATen fallbacks, decomposed by torch's own rules into ops coil lowers (`repeat`,
`native_group_norm`, `elu`, the `*_copy` views, `dist`, `linalg_vector_norm`). `var_mean`/`var`/`std`
stay whole: lowering computes them with a two-pass (centred) formula in one kernel. `addmm` stays
whole too: its decomposition upcasts bf16/fp16 operands to fp32 (`pw_cast_for_opmath`), which
would turn every bf16 linear layer into an fp32 SIMT GEMM, several times slower than cuBLAS's bf16
one.
`max_pool2d_with_indices` becomes coil's pooling op with int8 window offsets plus their
conversion to eager's int64 indices, so what the partitioner saves for the backward is the int8
tensor (ops/pooling.py says why this happens here, before the partition). `avg_pool2d` whose one
window spans the input (global pooling as `AvgPool2d(k >= size)`) becomes a sum and a division,
forward and backward (ops/spanning_pool.py); other calls stay whole. Weight normalisation's
fused backward, `_weight_norm_interface_backward`, becomes pointwise ops and sums
(ops/weight_norm.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from coil.lowering_ir.ops.pooling import max_pool2d_with_int8_offsets
from coil.lowering_ir.ops.spanning_pool import avg_pool2d_backward_spanning, avg_pool2d_spanning
from coil.lowering_ir.ops.weight_norm import weight_norm_interface_backward
from torch._decomp import core_aten_decompositions, get_decompositions

aten = torch.ops.aten

EXTRA = [
    aten.native_layer_norm,
    aten._softmax,
    aten._log_softmax,
    aten.gelu,
    aten._native_batch_norm_legit_functional,
    aten._native_batch_norm_legit_no_training,
    aten._native_batch_norm_legit,
    aten.native_batch_norm,
    aten.mean,
    aten.silu,
    aten.hardtanh,
    aten.relu,
    aten.leaky_relu,
    aten.sigmoid_backward,
    aten.tanh_backward,
    aten.threshold_backward,
    aten.clamp_min,
    aten.clamp_max,
    aten.embedding,
    aten.native_dropout,
    # composites of ops coil lowers: without these they would run as ATen fallbacks
    aten.repeat,
    aten.native_group_norm,
    aten.elu,
    aten.narrow_copy,
    aten.view_copy,
    aten.permute_copy,
    aten.unbind_copy,
    aten.as_strided_copy,
    aten.dist,
    # a core decomposition from torch 2.15 on; before it (2.11) `dist` and the norms stayed whole
    aten.linalg_vector_norm,
]
KEEP_WHOLE = {
    aten.var_mean.correction,
    aten.var.correction,
    aten.std.correction,
    # torch's decomposition returns the attention probabilities where the op returns logsumexp
    # (made for export; Inductor leaves it out too): wrong second output, and wrong gradients
    # when autograd's formula reads that output as logsumexp in the backward
    aten._scaled_dot_product_flash_attention_for_cpu.default,
}


def decomposition_table() -> dict[Any, Callable[..., Any]]:
    """The table coil passes to AOTAutograd (a fresh dict each call)."""
    table: dict[Any, Callable[..., Any]] = dict(core_aten_decompositions())
    table.update(get_decompositions(EXTRA))
    for op in KEEP_WHOLE:
        table.pop(op, None)
    table[aten.max_pool2d_with_indices.default] = max_pool2d_with_int8_offsets
    table[aten.avg_pool2d.default] = avg_pool2d_spanning
    table[aten.avg_pool2d_backward.default] = avg_pool2d_backward_spanning
    table[aten._weight_norm_interface_backward.default] = weight_norm_interface_backward
    return table
