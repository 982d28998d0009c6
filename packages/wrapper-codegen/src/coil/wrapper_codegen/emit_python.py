"""Emit a Wrapper IR program as Python source.

The module defines `make(device, constants, kernels)` returning `call(args)`: `args` is the boxed
list of graph inputs (cleared once unpacked, so inputs can be freed early); `kernels` maps kernel
names to launchers `kernel(grid, *args)` (coil.runtime.Kernel).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import sympy
import torch
from coil.lowering_ir.printing import pyexpr
from coil.wrapper_codegen.bindings import python_callee
from coil.wrapper_codegen.indirect import IndirectPlan, layout_literal
from coil.wrapper_codegen.lines import (
    TRACKER,
    Allocate,
    Arena,
    BindSymbol,
    CheckInput,
    ExternCall,
    Free,
    KernelCall,
    Line,
    Place,
    Ref,
    Return,
    Reuse,
    SizeOf,
    Track,
    Unpack,
    View,
    arena_view,
)
from coil.wrapper_codegen.segments import SegmentedProgram


def pyrepr(x: Any) -> str:
    """Python source for an argument tree (Refs become variable names, sympy becomes arithmetic,
    a relation a bool)."""
    if isinstance(x, Ref):
        return x.name
    if isinstance(x, sympy.Basic):
        return pyexpr(x)
    if isinstance(x, torch.dtype):
        return str(x)
    if isinstance(x, torch._ops.OpOverload | torch._ops.HigherOrderOperator):
        from coil.wrapper_codegen.plan import op_name

        return op_name(x)
    if isinstance(x, torch.device):
        return f"torch.device({str(x)!r})"
    if isinstance(x, torch.memory_format | torch.layout):
        return str(x)
    if isinstance(x, list):
        return "[" + ", ".join(pyrepr(v) for v in x) + "]"
    if isinstance(x, tuple):
        return "(" + "".join(pyrepr(v) + ", " for v in x) + ")"
    if isinstance(x, dict):
        return "{" + ", ".join(f"{k!r}: {pyrepr(v)}" for k, v in x.items()) + "}"
    if isinstance(x, float):
        if x != x:
            return "float('nan')"
        if x in (float("inf"), float("-inf")):
            return f"float({str(x)!r})"
        return repr(x)
    if x is None or isinstance(x, bool | int | str):
        return repr(x)
    if isinstance(x, complex):  # e.g. the 1j of a complex op's backward; parts may be nan/inf
        return f"complex({pyrepr(x.real)}, {pyrepr(x.imag)})"
    raise TypeError(f"cannot emit a literal of type {type(x).__name__}: {x!r}")


def _results(x: Any) -> str:
    if x is None:
        return "_"
    if isinstance(x, Ref):
        return x.name
    if isinstance(x, list | tuple):
        return "(" + "".join(_results(v) + ", " for v in x) + ")"
    raise TypeError(f"bad result target {x!r}")


def emit_line(line: Line, *, tracked_view: bool = True) -> list[str]:
    """The Python statements for one line (this function covers every Line type).

    A `View` is an `as_strided` view (shares the base's version counter) when `tracked_view`, else
    a `reinterpret` alias (torch's C fast path, several times cheaper; its own version counter): emit_python
    asks for tracked views only of graph inputs and constants that an in-place ATen extern writes
    (callers observe those mutations through `Tensor._version`: the CUDA-graph runner). `Reuse` always reinterprets:
    the donor's storage becomes a new, wrapper-internal buffer."""
    if isinstance(line, Unpack):
        names = ", ".join(n if n is not None else "_" for n in line.names)
        out = [f"{names}, = args" if line.names else "pass", "args.clear()"]
        return out
    if isinstance(line, SizeOf):
        return [f"{line.name} = {line.tensor}.size({line.dim})"]
    if isinstance(line, CheckInput):
        return [f"check_input({line.name}, {line.index}, {pyrepr(line.size)}, {pyrepr(line.stride)}, {line.dtype}, "
                f"{pyrepr(line.device)})"]
    if isinstance(line, Allocate):
        return [f"{line.name} = {allocator_name(line.device)}({pyrepr(line.size)}, {pyrepr(line.stride)}, {line.dtype})"]
    if isinstance(line, Arena):
        out = [f"{line.name} = {allocator_name(line.device)}(({line.nbytes},), (1,), torch.uint8)"]
        return out + [f"{arena_view(line.name, d)} = {line.name}.view({d})" for d in line.dtypes]
    if isinstance(line, Place):
        return [f"{line.name} = reinterpret({arena_view(line.arena, line.dtype)}, {pyrepr(line.size)}, "
                f"{pyrepr(line.stride)}, {line.offset // line.dtype.itemsize})"]
    if isinstance(line, Reuse):
        return [f"{line.name} = reinterpret({line.donor}, {pyrepr(line.size)}, {pyrepr(line.stride)}, 0); del {line.donor}"]
    if isinstance(line, Free):
        return [f"del {line.name}"]
    if isinstance(line, View):
        if tracked_view:
            return [f"{line.name} = as_strided({line.base}, {pyrepr(line.size)}, {pyrepr(line.stride)}, "
                    f"{line.base}.storage_offset() + {pyrepr(line.offset)})"]
        return [f"{line.name} = reinterpret({line.base}, {pyrepr(line.size)}, {pyrepr(line.stride)}, {pyrepr(line.offset)})"]
    if isinstance(line, KernelCall):
        args = ", ".join([*line.args, *map(pyrepr, line.sizes)])
        return [f"k_{line.kernel}({pyrepr(line.grid)}, {args})"]
    if isinstance(line, ExternCall):
        args = "".join(pyrepr(a) + ", " for a in line.args)
        kwargs = "".join(f"{k}={pyrepr(v)}, " for k, v in line.kwargs)
        out = [f"{_results(line.results)} = {python_callee(line.op)}({args}{kwargs})"]
        out += [f"{b.name} = {bound_value(b)}" for b in line.binds]
        for name, size, stride in line.expect:
            out.append(f"{name} = ensure_layout({name}, {pyrepr(size)}, {pyrepr(stride)})")
        return out
    if isinstance(line, Return):
        return [f"return {pyrepr(tuple(line.values))}"]
    if isinstance(line, Track):
        values = list(line.names) if line.event == "place" else []  # place also hands over the tensors
        return [f"{TRACKER}.{line.event}({', '.join([*(repr(n) for n in line.names), *values])})"]
    raise TypeError(f"no Python emitter for {type(line).__name__}")


def bound_value(b: BindSymbol) -> str:
    """The Python expression a BindSymbol binds its name to."""
    read = {"value": b.source, "int": f"int({b.source})", "size": f"{b.source}.size({b.dim})",
            "stride": f"{b.source}.stride({b.dim})", "storage_offset": f"{b.source}.storage_offset()"}[b.attr]
    return read if b.divisor == 1 else f"{read} // {b.divisor}"


def allocator_name(device: object) -> str:
    """The wrapper variable holding `fast_empty(device)` (bound once in `make`)."""
    return "alloc_" + re.sub(r"\W", "_", str(device))


# the wrapper's run-time helpers (ensure_layout, check_input, ...): helpers.py, verbatim
PRELUDE = Path(__file__).with_name("helpers.py").read_text() + "\n"


def _refs(x: Any) -> list[str]:
    if isinstance(x, Ref):
        return [x.name]
    if isinstance(x, list | tuple):
        return [n for v in x for n in _refs(v)]
    if isinstance(x, dict):
        return [n for v in x.values() for n in _refs(v)]
    return []


def _written_by_aten(lines: list[Line]) -> set[str]:
    """Names passed to an in-place ATen extern (`aten.<name>_.<overload>`, e.g. copy_): the only
    writes that move `Tensor._version` (Triton kernels do not)."""
    out: set[str] = set()
    for line in lines:
        if isinstance(line, ExternCall):
            packet = line.op.split(".")[-2] if line.op.count(".") >= 2 else line.op
            if packet.endswith("_") or any(k == "out" for k, _ in line.kwargs):
                out.update(_refs(line.args))
                out.update(n for _, v in line.kwargs for n in _refs(v))
    return out


def _emit_body(lines: list[Line], constant_names: list[str], all_lines: list[Line]) -> list[str]:
    """Statements for `lines`; a View is tracked (`as_strided`) when its base is a graph input,
    a constant or a view of those, and an in-place ATen extern of `all_lines` writes it."""
    written = _written_by_aten(all_lines)
    external = set(constant_names)  # graph inputs, constants and views of them
    for line in all_lines:
        if isinstance(line, Unpack):
            external.update(n for n in line.names if n is not None)
        if isinstance(line, View) and line.base in external:
            external.add(line.name)
    body: list[str] = []
    for line in lines:
        tracked = isinstance(line, View) and line.base in external and line.name in written
        body.extend(emit_line(line, tracked_view=tracked))
    return body


def _emit_segments(segmented: SegmentedProgram, lines: list[Line], constant_names: list[str]) -> list[str]:
    """Inside `make`: one boxed function per segment and `call.segments`, the plan the runtime's
    segment driver runs (coil.runtime.segments)."""
    out: list[str] = []
    specs: list[str] = []
    for k, seg in enumerate(segmented.segments):
        body = emit_line(Unpack(seg.inputs)) if seg.inputs else ["args.clear()"]
        body += _emit_body(list(seg.lines), constant_names, lines)
        body.append(f"return {pyrepr(tuple(Ref(n) for n in seg.outputs))}")
        out.append(f"    def segment_{k}(args):")
        out.extend("        " + b for b in body)
        out.append("")
        specs.append(f"        {{'fn': segment_{k}, 'capture': {seg.capture!r}, 'inputs': {seg.inputs!r}, "
                     f"'outputs': {seg.outputs!r}, 'launches': {seg.launches}, 'why': {seg.why!r}}},")
    returns = ", ".join(f"('ref', {v.name!r})" if isinstance(v, Ref) else f"('value', {pyrepr(v)})"
                        for v in segmented.returns)
    out.append("    call.segments = {")
    out.append(f"        'inputs': {segmented.graph_inputs!r},")
    out.append("        'segments': [")
    out.extend("    " + s for s in specs)
    out.append("        ],")
    out.append(f"        'returns': ({returns}{',' if len(segmented.returns) == 1 else ''}),")
    out.append("    }")
    return out


def emit_python(lines: list[Line], kernel_names: list[str], constant_names: list[str], title: str, *,
                segments: SegmentedProgram | None = None, indirect: IndirectPlan | None = None) -> str:
    """The whole wrapper module for one graph.

    With `segments` (segments.split_segments of the same program), `make` also defines one boxed
    function per segment and attaches the plan to the returned callable as `call.segments`: a dict
    with `inputs` (the graph input names, None for unused ones), `segments` (per segment: `fn`,
    `capture`, `inputs`, `outputs`, `launches`, `why`) and `returns` (per graph output
    `('ref', name)` or `('value', literal)`). `call` itself still runs the whole program.

    With `indirect` (indirect.plan_indirect; `lines` are its rewritten lines), `make` makes the
    plan's `PointerTable` (of the prelude), `call` starts by writing its inputs' addresses into
    the table and binding it (`prepare`), and the returned callable carries the `PointerTable` as
    `call.indirect`.
    Segments and an indirect plan do not go together (ValueError).
    """
    if segments is not None and indirect is not None:
        raise ValueError("emit_python: a segmented program cannot read inputs through a pointer table")
    body = _emit_body(lines, constant_names, lines)
    out = [f"# coil wrapper for {title}", PRELUDE, "def make(device, constants, kernels):"]
    for k in kernel_names:
        out.append(f"    k_{k} = kernels[{k!r}]")
    for c in constant_names:
        out.append(f"    {c} = constants[{c!r}]")
    devices = {str(line.device): line.device for line in lines if isinstance(line, Allocate | Arena)}
    for dev in devices.values():
        out.append(f"    {allocator_name(dev)} = fast_empty({pyrepr(dev)})")
    if indirect is not None:
        slots = ", ".join(f"{i}: ({k}, {pyrepr(size)}, {pyrepr(stride)}, {pyrepr(dtype)})"
                          for i, (k, size, stride, dtype) in layout_literal(indirect).items())
        out.append(f"    {indirect.table}_inputs = PointerTable(device, {{{slots}}})")
    out.append("")
    out.append("    def call(args):")
    if indirect is not None:
        out.append(f"        {indirect.table} = {indirect.table}_inputs.prepare(args)")
    out.extend("        " + b for b in body)
    out.append("")
    if segments is not None:
        out.extend(_emit_segments(segments, lines, constant_names))
        out.append("")
    if indirect is not None:
        out.append(f"    call.indirect = {indirect.table}_inputs")
    out.append("    return call")
    return "\n".join(out) + "\n"
