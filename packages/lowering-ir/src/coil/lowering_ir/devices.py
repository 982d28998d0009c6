"""Which device each operation runs on when a graph mixes devices: the one place this rule lives.

Eager PyTorch lets a CPU 0-d tensor combine with tensors of another device as a scalar, copies
across devices only where the program says so (`.to(device)`, `copy_`), and returns each output
on the device it computes it on. coil's kernels run on one device, the graph's (`graph_device`:
its CUDA device when any tensor is on one, else the CPU), and a kernel can only dereference
pointers of its own device. So lowering decides:

1. A node whose results are on another device than the graph's (a CPU tensor in a CUDA graph:
   `torch.tensor(7)` returned, arithmetic after `.to("cpu")`) is an ATen call, run where its
   tensors are: the lowerer drops the kernels its lowering made (`elsewhere`) and calls the op.
   Views make no kernel and stay views.
2. A kernel never reads a buffer of another device (`place_reads`). A read of a one-element CPU
   buffer whose value is known at compile time (a constant, or a pure ATen op of known values:
   `lift_fresh_copy` of `torch.tensor(0.5)`, `scalar_tensor`) becomes that value, a literal of
   the kernel; so does a read of a copy of such a value to the kernel's device
   (`torch.tensor(3).type_as(x)`, `.to(x.device)`: `device_copy`); the ATen calls that computed
   it are dropped when nothing else reads them (`foldable`), so no copy step is left to split a
   CUDA graph. Any other read (a CPU 0-d graph input, a value computed at run time, a CPU index
   tensor) goes to a copy on the kernel's device made by an explicit wrapper step,
   `aten._to_copy(..., device=...)`, once per buffer and call, before the first reader: an ATen
   step the CUDA-graph capture rule sees (coil.scheduler.capture, rule 3), where a value read on
   the host and passed as a kernel argument would be frozen into a captured graph.
3. Copies across devices (`_to_copy` to another device, `copy` or `copy_` between devices) are
   ATen calls (the copy lowering refuses them), never kernels.

The scheduler never fuses kernels of different devices (coil.scheduler.group.plan).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import sympy
import torch
import torch.fx
from coil.lowering_ir.errors import LoweringError
from coil.lowering_ir.layout import Layout, contiguous_strides
from coil.lowering_ir.nodes import (
    Buffer,
    ComputedBuffer,
    ExternKernel,
    LoweredGraph,
    Operation,
    Pointwise,
    Reduction,
    ReinterpretView,
    Scatter,
)
from coil.lowering_ir.values import Constant, Load, Op, Value
from torch._subclasses.fake_tensor import is_fake, unset_fake_temporarily

# ops never evaluated at compile time: their value differs per call (random), depends on data
# in ways the graph does not show, or they exist for a side effect (a functional assert's token)
_RUN_TIME_TAGS = (torch.Tag.nondeterministic_seeded, torch.Tag.data_dependent_output,
                  torch.Tag.dynamic_output_shape)
_SIDE_EFFECT_PREFIXES = ("aten::_functional_", "aten::_assert", "aten::_print")


def graph_device(gm: torch.fx.GraphModule) -> torch.device:
    """The device `gm`'s kernels run on: the first CUDA device of a tensor it holds, else its
    first device other than the CPU (meta: lowering tests at GPU scale), else the CPU."""
    other: torch.device | None = None
    for node in gm.graph.nodes:
        for t in _tensors(node.meta.get("val")):
            if t.device.type == "cuda":
                return t.device
            if other is None and t.device.type != "cpu":
                other = t.device
    return other if other is not None else torch.device("cpu")


def same_device(a: torch.device, b: torch.device) -> bool:
    """One device (an index of None matches any index of its type)."""
    return a.type == b.type and (a.index is None or b.index is None or a.index == b.index)


def elsewhere(operations: Sequence[Operation], device: torch.device) -> bool:
    """Does one of `operations` make a kernel (Pointwise, Reduction, Scatter) that would run on
    another device than `device`?"""
    return any(isinstance(op, Pointwise | Reduction | Scatter) and not same_device(op.output.layout.device, device)
               for op in operations)


def off_device(node: torch.fx.Node, device: torch.device) -> bool:
    """Does `node` touch a tensor of another device than `device` (its results, or its inputs:
    a copy across devices)? Such a node is an ATen call by design (rules 1 and 3), an intended
    extern rather than a fallback."""
    vals = [node.meta.get("val")] + [a.meta.get("val") for a in node.all_input_nodes]
    return any(not same_device(t.device, device) for v in vals for t in _tensors(v))


def foldable(op: Operation) -> bool:
    """Is `op` an ATen call computing one element from CPU tensors that can run at compile time
    (deterministic, no mutation, no side effect), its result on the CPU or a copy of it to
    another device (`device_copy`)? Lowering folds its value into the kernels that read it (of
    other devices for a CPU result, of the copy's device for a copy), and drops it when nothing
    else reads it."""
    if not isinstance(op, ExternKernel) or op.mutates or not isinstance(op.results, Buffer):
        return False
    k = op.kernel
    if not isinstance(k, torch._ops.OpOverload) or k._schema.is_mutable:
        return False
    if any(t in k.tags for t in _RUN_TIME_TAGS) or k._schema.name.startswith(_SIDE_EFFECT_PREFIXES):
        return False
    layout = op.results.layout
    return ((layout.device.type == "cpu" or device_copy(op)) and layout.numel == 1
            and all(t.layout.device.type == "cpu" for t in op.tensor_args()))


def device_copy(op: ExternKernel) -> bool:
    """Is `op` a copy to a device other than the CPU (`aten._to_copy` with `device=`: what
    `.to(device)`, `.cuda()` and `type_as` of a tensor on that device trace to)? Of CPU values
    when `foldable(op)` holds too."""
    dev = op.kwargs.get("device")
    return op.kernel is torch.ops.aten._to_copy.default and isinstance(dev, torch.device) and dev.type != "cpu"


def place_reads(graph: LoweredGraph, fresh: Callable[[str], str]) -> list[Operation]:
    """`graph.operations` where no kernel reads a buffer of another device than its own (rule 2
    of the module docstring): such reads become literals or reads of a copy, the copies inserted
    before their first reader; `fresh(prefix)` names the copies (their views join `graph.views`).
    Raises LoweringError for a read it cannot place (a copy of a buffer of symbolic size)."""
    known = _Known(graph)
    buffers = graph.buffers()
    copies: dict[tuple[str, str], ComputedBuffer] = {}
    out: list[Operation] = []
    for op in graph.operations:
        if not isinstance(op, Pointwise | Reduction | Scatter):
            out.append(op)
            continue
        device = op.output.layout.device

        def place(ld: Load, device: torch.device = device, op: Operation = op) -> Value | None:
            buf = buffers.get(ld.buffer)
            if buf is None:
                return None
            if same_device(buf.layout.device, device):  # a known CPU element copied here: its value
                value = known.get(ld.buffer) if known.copied(ld.buffer) else None
                return _literal(value, ld) if value is not None else None
            value = known.get(ld.buffer) if buf.layout.device.type == "cpu" else None
            if value is not None:
                return _literal(value, ld)
            key = (ld.buffer, str(device))
            if key not in copies:
                copy, steps = _copy(buf, device, op.origins, fresh, graph)
                copies[key] = copy
                out.extend(steps)
            return Load(copies[key].name, ld.index, ld.dtype, ld.mask, ld.indirect)

        memo: dict[int, Value] = {}
        if isinstance(op, Scatter):
            op.value = _rewrite(op.value, place, memo)
            target = _rewrite(op.target, place, memo)
            assert isinstance(target, Load)
            op.target = target
        else:
            op.body = _rewrite(op.body, place, memo)
        out.append(op)
    return out


def _tensors(val: Any) -> list[torch.Tensor]:
    if isinstance(val, torch.Tensor):
        return [val]
    if isinstance(val, list | tuple):
        return [t for v in val for t in _tensors(v)]
    return []


def _host_scalar(value: Any) -> bool:
    """A real (not fake) one-element CPU tensor, whose value is known now."""
    return (isinstance(value, torch.Tensor) and not is_fake(value) and value.device.type == "cpu"
            and value.numel() == 1 and not value.dtype.is_complex)


class _Known:
    """The values of one-element CPU buffers known at compile time (constants, and foldable ATen
    calls of known values), each computed when first asked for."""

    def __init__(self, graph: LoweredGraph) -> None:
        self.constants = {c.name: c.value for c in graph.constants}
        self.writers = {b.name: op for op in graph.operations if isinstance(op, ExternKernel) for b in op.outputs}
        self.memo: dict[str, torch.Tensor | None] = {}

    def copied(self, name: str) -> bool:
        """Is buffer `name` made by a one-element copy of CPU values to another device?"""
        op = self.writers.get(name)
        return op is not None and device_copy(op) and foldable(op)

    def get(self, name: str) -> torch.Tensor | None:
        """Buffer `name`'s value, or None when it is only known at run time."""
        if name not in self.memo:
            value = self.constants.get(name)
            if value is not None:
                self.memo[name] = value if _host_scalar(value) else None
            else:
                op = self.writers.get(name)
                self.memo[name] = _evaluate(op, self.get) if op is not None and foldable(op) else None
        return self.memo[name]


def _evaluate(op: ExternKernel, known: Callable[[str], torch.Tensor | None]) -> torch.Tensor | None:
    """The value of foldable `op` when every tensor it reads is known, else None."""

    def arg(x: Any) -> Any:
        if isinstance(x, Buffer | ReinterpretView):
            base = known(x.storage.name)
            if base is None:
                raise LookupError(x.storage.name)
            if isinstance(x, Buffer):
                return base
            return base.as_strided([int(s) for s in x.layout.size], [int(s) for s in x.layout.stride],
                                   base.storage_offset() + int(x.layout.offset))
        if isinstance(x, sympy.Basic):
            if x.is_Integer:
                return int(x)
            if x.is_Number:
                return float(x)
            raise LookupError(str(x))  # a size only known at run time
        if isinstance(x, list | tuple):
            return type(x)(arg(y) for y in x)
        return x

    try:
        args, kwargs = arg(op.args), {k: arg(v) for k, v in op.kwargs.items()}
        if device_copy(op):  # the copy's value, kept on the host
            kwargs["device"] = torch.device("cpu")
        with unset_fake_temporarily(), torch.no_grad():
            value = op.kernel(*args, **kwargs)
    except Exception:  # an unknown input, or an op that does not run here: read at run time
        return None
    return value if _host_scalar(value) else None


def _literal(value: torch.Tensor, ld: Load) -> Value:
    """The known element `value` as the Value `ld` reads (0 where its mask is false)."""
    with unset_fake_temporarily():  # lowering may run under the caller's FakeTensorMode
        item = value.item()
    if ld.dtype == torch.bool:
        lit = Constant(bool(item), ld.dtype)
    elif ld.dtype.is_floating_point:
        lit = Constant(float(item), ld.dtype)
    else:
        lit = Constant(int(item), ld.dtype)
    if ld.mask is None:
        return lit
    zero = Constant(False if ld.dtype == torch.bool else 0.0 if ld.dtype.is_floating_point else 0, ld.dtype)
    return Op("where", (ld.mask, lit, zero), ld.dtype)


def _copy(buf: Buffer, device: torch.device, origins: tuple[str, ...], fresh: Callable[[str], str],
          graph: LoweredGraph) -> tuple[ComputedBuffer, list[Operation]]:
    """A copy of `buf`'s storage on `device` and the ATen step making it. The copy holds the
    storage's elements in storage order (a flat view of the whole extent), so a load's storage
    index reads the same element in it."""
    extent = sympy.sympify(buf.layout.storage_extent())
    if not isinstance(extent, sympy.Integer):
        raise LoweringError(origins[0] if origins else graph.name, "device copy",
                            f"a kernel on {device} reads {buf.name} on {buf.layout.device}, of symbolic size {extent}")
    flat: Buffer | ReinterpretView = buf
    size = (sympy.Integer(int(extent)),)
    if buf.layout.size != size or buf.layout.stride != (sympy.Integer(1),) or buf.layout.offset != 0:
        flat = ReinterpretView(fresh("view"), buf, Layout(buf.layout.device, buf.layout.dtype, size, (sympy.Integer(1),)))
        graph.views.append(flat)
    copy = ComputedBuffer(f"{fresh('buf')}_{device.type}", Layout(device, buf.layout.dtype, size, contiguous_strides(size)))
    step = ExternKernel(fresh("op"), origins, torch.ops.aten._to_copy.default, (flat,), {"device": device}, copy, False)
    return copy, [step]


def _rewrite(value: Value, place: Callable[[Load], Value | None], memo: dict[int, Value]) -> Value:
    """`value` with each Load replaced by `place(load)` where that is not None (loads inside a
    load's mask and indirect indices first)."""
    got = memo.get(id(value))
    if got is not None:
        return got
    out: Value = value
    if isinstance(value, Load):
        mask = _rewrite(value.mask, place, memo) if value.mask is not None else None
        indirect = tuple((s, _rewrite(v, place, memo)) for s, v in value.indirect)
        ld = value
        if mask is not value.mask or any(a is not b for (_, a), (_, b) in zip(indirect, value.indirect, strict=True)):
            ld = Load(value.buffer, value.index, value.dtype, mask, indirect)
        out = place(ld) or ld
    elif isinstance(value, Op):
        args = tuple(_rewrite(a, place, memo) for a in value.args)
        if any(a is not b for a, b in zip(args, value.args, strict=True)):
            out = Op(value.name, args, value.dtype)
    memo[id(value)] = out
    return out
