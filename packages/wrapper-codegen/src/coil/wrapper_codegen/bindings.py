"""Which ATen externs the Python wrapper calls through torch's generated Python bindings.

A call through an `OpOverload` (`torch.ops.aten.convolution.default(...)`) converts every
argument to an IValue against the operator's schema before it dispatches; the generated binding
(`torch.convolution(...)`) parses the same arguments with torch's Python argument parser, which
costs several microseconds less per call (a third of a convolution's host time). A wrapper that
runs without CUDA graphs pays that on every call of every extern, and a small model is bound by
exactly that host time.

The rule: an extern in :data:`PUBLIC` is emitted as ``torch.<name>(...)`` with the same
positional and keyword arguments. Each entry is an ``aten`` operator whose ``default`` overload
is the only overload its binding can select for the default schema's arguments (its other
overloads need an ``out`` tensor, an ``out_dtype`` or quantized arguments the wrapper never
passes), so the binding runs the same kernel with the same arguments and returns the same
results; ``tests/test_bindings.py`` checks each entry against its `OpOverload` (flash and
cuDNN attention are not entries: their bindings return integer results as tensors). Any other
extern keeps the `OpOverload` call, which is exact for every operator.
"""

from __future__ import annotations

import torch

__all__ = ["PUBLIC", "python_callee"]

# hot externs of real models: convolutions, products and memory-efficient attention
PUBLIC = frozenset({
    "convolution", "mm", "addmm", "bmm", "baddbmm", "_scaled_dot_product_efficient_attention",
})  # fmt: skip

_PREFIX = "torch.ops.aten."


def python_callee(op: str) -> str:
    """The callee the Python wrapper emits for the extern ``op`` (a qualified `op_name`):
    ``torch.<name>`` for the ``default`` overload of an operator in :data:`PUBLIC` that this
    torch exposes, else ``op`` itself."""
    if not op.startswith(_PREFIX):
        return op
    packet, _, overload = op[len(_PREFIX):].partition(".")
    if overload != "default" or packet not in PUBLIC:
        return op
    if not hasattr(torch._C._VariableFunctions, packet):
        return op
    return f"torch.{packet}"
