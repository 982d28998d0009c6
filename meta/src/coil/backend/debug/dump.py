"""Readable text dumps of the pipeline's artefacts: lowered IR, schedule, memory plan.

These are for people (debug dir, COIL_LOGS), not for machines: the formats may change.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from coil.lowering_ir import (
    Buffer,
    Constant,
    ExternKernel,
    IndexValue,
    InputBuffer,
    Load,
    LoweredGraph,
    ObjectInput,
    Op,
    Operation,
    Pointwise,
    Reduction,
    ReinterpretView,
    SymbolInput,
    Value,
)
from coil.scheduler import ComboGroup, KernelGroup, Schedule, is_matmul_group
from coil.wrapper_codegen import WrapperProgram


def _layout(ref: Buffer | ReinterpretView) -> str:
    lay = ref.layout
    dtype = str(lay.dtype).removeprefix("torch.")
    size = ", ".join(map(str, lay.size))
    stride = ", ".join(map(str, lay.stride))
    off = f" offset {lay.offset}" if lay.offset != 0 else ""
    return f"{lay.device} {dtype} size [{size}] stride [{stride}]{off}"


def _value_lines(value: Value) -> list[str]:
    """SSA lines for a value DAG (each shared node once); the last line's name is the result."""
    names: dict[int, str] = {}
    out: list[str] = []

    def go(v: Value) -> str:
        if id(v) in names:
            return names[id(v)]
        if isinstance(v, Constant):
            return repr(v.value)
        dtype = str(v.dtype).removeprefix("torch.")
        if isinstance(v, Load):
            text = f"load {v.buffer}[{v.index}]"
            if v.mask is not None:
                text += f" if {go(v.mask)}"
        elif isinstance(v, IndexValue):
            text = f"index {v.index}"
        elif isinstance(v, Op):
            text = f"{v.name}({', '.join(go(a) for a in v.args)})"
        else:
            raise TypeError(f"unknown value {v!r}")
        name = f"t{len(out)}"
        names[id(v)] = name
        out.append(f"{name} = {text} : {dtype}")
        return name

    result = go(value)
    if not out or not out[-1].startswith(result + " "):
        out.append(f"result = {result}")
    return out


def _arg(x: Any) -> str:
    if isinstance(x, Buffer | ReinterpretView):
        return x.name
    if isinstance(x, list):
        return "[" + ", ".join(_arg(y) for y in x) + "]"
    if isinstance(x, tuple):
        return "(" + ", ".join(_arg(y) for y in x) + ")"
    if isinstance(x, dict):
        return "{" + ", ".join(f"{k}: {_arg(v)}" for k, v in x.items()) + "}"
    return str(x) if hasattr(x, "free_symbols") else repr(x)  # sympy expressions print plainly


def format_operation(op: Operation) -> list[str]:
    """One operation with its body (Pointwise/Reduction) or call (ExternKernel)."""
    origins = ", ".join(op.origins) or "-"
    if isinstance(op, Pointwise | Reduction):
        ranges = ", ".join(map(str, op.ranges))
        if isinstance(op, Reduction):
            rr = ", ".join(map(str, op.reduction_ranges))
            acc = str(op.acc_dtype).removeprefix("torch.")
            head = (f"{op.name}: Reduction {op.reduction_type} -> {op.output.name}  ranges [{ranges}] "
                    f"reduce over [{rr}] acc {acc}  (from FX: {origins})")
        else:
            head = f"{op.name}: Pointwise -> {op.output.name}  ranges [{ranges}]  (from FX: {origins})"
        body = [f"    {line}" for line in _value_lines(op.body)]
        return [head, *body, f"    store {op.output.name}[{op.store_index}]"]
    if isinstance(op, ExternKernel):
        kwargs = "".join(f", {k}={_arg(v)}" for k, v in op.kwargs.items())
        tag = " fallback" if op.fallback else ""
        mut = f" mutates {', '.join(op.mutates)}" if op.mutates else ""
        return [f"{op.name}: Extern{tag} {_arg(op.results)} = {op.kernel}({', '.join(_arg(a) for a in op.args)}{kwargs})"
                f"{mut}  (from FX: {origins})"]
    return [f"{op.name}: {type(op).__name__} (from FX: {origins})"]


def format_ir(graph: LoweredGraph) -> str:
    """The lowered graph: inputs, constants, buffers with layouts, views, operations, outputs."""
    out = [f"# lowered IR of {graph.name}", "", "inputs:"]
    for i, inp in enumerate(graph.inputs):
        if isinstance(inp, InputBuffer):
            out.append(f"  {inp.name} (input {inp.index}): {_layout(inp)}")
        elif isinstance(inp, SymbolInput):
            out.append(f"  input {inp.index}: size symbol {inp.symbol}")
        elif isinstance(inp, ObjectInput):
            out.append(f"  {inp.name} (input {inp.index}): opaque object")
        else:
            out.append(f"  input {i}: unused")
    out.append("constants:")
    out += [f"  {c.name}: {_layout(c)}" for c in graph.constants] or ["  (none)"]
    out.append("computed buffers:")
    for op in graph.operations:
        out += [f"  {b.name}: {_layout(b)}  (written by {op.name})" for b in op.outputs]
    out.append("views:")
    out += [f"  {v.name} = view of {v.base.name}: {_layout(v)}" for v in graph.views] or ["  (none)"]
    out += ["", "operations:"]
    for op in graph.operations:
        out += format_operation(op)
    out += ["", "outputs: " + ", ".join(_arg(o) for o in graph.outputs)]
    return "\n".join(out) + "\n"


def format_schedule(sched: Schedule) -> str:
    """Steps in order (kernel groups with members, loops, stores) and the whole FusionLog."""
    out = [f"# schedule of {sched.graph.name}: {len(sched.kernels())} kernels, {len(sched.externs())} externs", ""]
    for i, st in enumerate(sched.steps):
        if isinstance(st, KernelGroup):
            # a matmul group runs as a GEMM template: its first member is the product
            kind = ("matmul template" if is_matmul_group(st)
                    else f"combo of {len(st.parts)}: x [{', '.join(str(p.xnumel) for p in st.parts)}]"
                    if isinstance(st, ComboGroup) else "reduction" if st.is_reduction else "pointwise")
            xd = ", ".join(map(str, st.x_dims))
            rd = ", ".join(map(str, st.r_dims))
            out.append(f"step {i}: {st.name} ({kind}) x [{xd}] r [{rd}]")
            for m in st.members:
                out.append(f"    {m.kind:6} {m.op.name} -> {m.op.output.name}  (from FX: {', '.join(m.op.origins) or '-'})")
            out.append(f"    stores: {', '.join(st.stores) or '-'}; in registers only: {', '.join(st.internal) or '-'}")
        elif isinstance(st, ExternKernel):
            out.append(f"step {i}: extern {st.name} {st.kernel}{' (fallback)' if st.fallback else ''}"
                       f"  (from FX: {', '.join(st.origins) or '-'})")
        else:
            out.append(f"step {i}: {type(st).__name__} {st.name}  (from FX: {', '.join(st.origins) or '-'})")
    counts: dict[tuple[str, str, bool, str], int] = {}
    for attempt in sched.log.attempts:
        counts[attempt] = counts.get(attempt, 0) + 1
    out += ["", f"fusion log ({len(sched.log.attempts)} attempts, {len(counts)} distinct, in first-tried order; "
                "'kept' = not fused, with the reason):"]
    for (first, second, taken, reason), n in counts.items():
        times = f" (x{n})" if n > 1 else ""
        out.append(f"  {'FUSED' if taken else 'kept '} {first} + {second}: {reason}{times}")
    return "\n".join(out) + "\n"


@dataclass(frozen=True)
class Span:
    """A buffer the wrapper owns: written at step `first`, last needed at step `last` (inclusive).

    `last` is the number of steps for graph outputs; `nbytes` is 0 when the size is symbolic.
    """

    name: str
    first: int
    last: int
    nbytes: int
    output: bool


def step_reads(step: KernelGroup | Operation) -> list[str]:
    """Storage buffers a step reads from memory."""
    if isinstance(step, KernelGroup):
        return list(dict.fromkeys(r for m in step.members for r in m.op.reads() if r not in step.internal))
    return step.reads()


def step_writes(step: KernelGroup | Operation) -> list[str]:
    """Buffers a step writes to memory."""
    if isinstance(step, KernelGroup):
        return list(step.stores)
    return [b.name for b in step.outputs]


def spans(sched: Schedule) -> list[Span]:
    """Lifetimes of the buffers the schedule writes, derived from the steps (not from the wrapper)."""
    graph = sched.graph
    bufs = graph.buffers()
    outputs = {o.storage.name for o in graph.outputs if isinstance(o, Buffer | ReinterpretView)}
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for i, st in enumerate(sched.steps):
        for r in step_reads(st):
            last[r] = i
        for w in step_writes(st):
            first.setdefault(w, i)
    n = len(sched.steps)
    out = []
    for name, f in first.items():
        extent = bufs[name].nbytes_expr
        nbytes = int(extent) if getattr(extent, "is_Integer", False) else 0
        out.append(Span(name, f, n if name in outputs else max(f, last.get(name, f)), nbytes, name in outputs))
    return out


def format_memory_plan(sched: Schedule, program: WrapperProgram) -> str:
    """Buffer lifetimes (steps), sizes, and which storage each buffer reuses."""
    storage = dict(program.reuse.storage) if program.reuse is not None else {}
    out = [f"# memory plan of {sched.graph.name}: {len(sched.steps)} steps"]
    if program.reuse is not None:
        out.append(f"peak bytes with reuse {program.reuse.peak_bytes}, without {program.reuse.unplanned_peak_bytes}")
    else:
        out.append("reuse off (COIL_REUSE=0)")
    out += ["", f"{'buffer':14} {'bytes':>10} {'first':>6} {'last':>6}  storage"]
    for s in sorted(spans(sched), key=lambda s: (s.first, s.name)):
        donor = storage.get(s.name, s.name)
        note = (f"in place over {program.inplace[s.name]}" if s.name in program.inplace
                else f"reuses {donor}" if donor != s.name else "own")
        out.append(f"{s.name:14} {s.nbytes:>10} {s.first:>6} {s.last:>6}  {note}{' (output)' if s.output else ''}")
    return "\n".join(out) + "\n"


def timeline_csv(all_spans: Sequence[Span]) -> str:
    """The memory timeline as CSV: one row per buffer (name, bytes, first step, last step, output)."""
    rows = ["buffer,bytes,first_step,last_step,output"]
    rows += [f"{s.name},{s.nbytes},{s.first},{s.last},{int(s.output)}" for s in all_spans]
    return "\n".join(rows) + "\n"
