"""Build the Wrapper IR for a schedule: allocation, reuse and freeing per the memory plan."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import sympy
import torch
from coil.lowering_ir import (
    Buffer,
    ConstantBuffer,
    InputBuffer,
    ReinterpretView,
    Scatter,
    SymbolInput,
)
from coil.memory_planner import BufferLifetime, ReusePlan, plan_reuse
from coil.scheduler import KernelGroup, Schedule
from coil.scheduler.capture import capture_blocker, graph_device
from coil.scheduler.ordering import step_reads, step_writes
from coil.wrapper_codegen.inplace import inplace_scatters, kernel_stores
from coil.wrapper_codegen.lines import (
    Allocate,
    CheckInput,
    ExternCall,
    Free,
    KernelCall,
    Line,
    Ref,
    Return,
    Reuse,
    SizeOf,
    Unpack,
    View,
)


class DynamicShapeError(NotImplementedError):
    """A size the wrapper cannot compute at run time (a symbol no input binds)."""


def ints(xs: Sequence[Any]) -> tuple[Any, ...]:
    """Sizes as ints where static, sympy expressions (evaluated at run time) where symbolic."""
    out: list[Any] = []
    for x in xs:
        e = sympy.sympify(x)
        out.append(int(e) if isinstance(e, sympy.Integer) else e)
    return tuple(out)


def op_name(op: Any) -> str:
    """Qualified name of an OpOverload, e.g. 'torch.ops.aten.mm.default' (or of a
    higher-order op, e.g. 'torch.ops.higher_order.with_effects')."""
    if isinstance(op, torch._ops.HigherOrderOperator):
        return f"torch.ops.higher_order.{op.name()}"  # type: ignore[no-untyped-call]
    ns = op.namespace
    packet = op._schema.name.split("::")[1]
    return f"torch.ops.{ns}.{packet}.{op._overloadname}"


@dataclass
class KernelLaunch:
    """What the wrapper needs to know of one generated kernel."""

    name: str
    pointer_args: tuple[str, ...]
    size_args: tuple[Any, ...]
    grid: Any


@dataclass
class WrapperProgram:
    """The Wrapper IR of one graph plus what it references.

    `blockers` maps the index (in `lines`) of each ExternCall a CUDA graph cannot capture to the
    reason (coil.scheduler.capture); `segments.split_segments` cuts the program around them.
    """

    lines: list[Line]
    constants: dict[str, torch.Tensor]
    reuse: ReusePlan | None = None
    fallback_ops: list[str] = field(default_factory=list)
    blockers: dict[int, str] = field(default_factory=dict)


def build(sched: Schedule, launches: dict[str, KernelLaunch], *, reuse: bool = True,
          check_inputs: bool = False) -> WrapperProgram:
    """Wrapper IR for `sched`; `launches` maps each kernel group name to its launch facts.

    With `check_inputs`, a CheckInput line per tensor input (after the sizes are bound, before
    any step) makes the wrapper raise ValueError on an input of another shape, stride, dtype or
    device than the graph was compiled for, so no kernel runs on memory it was not made for.
    Leave it off where the caller already guards inputs (Dynamo does).
    """
    g = sched.graph
    lines: list[Line] = []
    names: list[str | None] = [
        b.name if isinstance(b, InputBuffer) else b.symbol.name if isinstance(b, SymbolInput) else None
        for b in g.inputs
    ]
    lines.append(Unpack(tuple(names)))
    bound = {b.symbol for b in g.inputs if isinstance(b, SymbolInput)}
    for inp in g.inputs:
        if isinstance(inp, InputBuffer):
            for d, s in enumerate(inp.layout.size):
                if isinstance(s, sympy.Symbol) and s not in bound:
                    lines.append(SizeOf(s.name, inp.name, d))
                    bound.add(s)
    if check_inputs:
        lines += [CheckInput(b.name, b.index, ints(b.layout.size), ints(b.layout.stride), b.layout.dtype,
                             b.layout.device) for b in g.inputs if isinstance(b, InputBuffer)]
    constants = {c.name: c.value for c in g.constants if isinstance(c, ConstantBuffer) and c.value is not None}
    buffers = g.buffers()
    steps = sched.steps
    n = len(steps)
    # -- lifetimes -----------------------------------------------------------------------
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for i, st in enumerate(steps):
        reads = step_reads(st)
        for r in reads:
            last[r] = i
        for w in step_writes(st):
            first.setdefault(w, i)
    for i, st in enumerate(steps):  # a result nobody reads dies right after the step making it
        for w in step_writes(st):
            last.setdefault(w, i)
    out_storage = {o.storage.name for o in g.outputs if isinstance(o, Buffer | ReinterpretView)}
    for o in out_storage:
        last[o] = n
    inputs = {b.name for b in g.inputs if isinstance(b, InputBuffer)} | set(constants)
    # only kernel stores are allocated by the wrapper, so only they can take a donor's storage;
    # a donor assigned to an extern result (which ATen allocates) is simply freed as usual
    allocated = kernel_stores(steps)
    # a Scatter whose base dies at it writes into the base's storage: the storage's lifetime
    # runs from the base's first step to the last of the scatter outputs that take it over
    inplace = inplace_scatters(steps, buffers, last, out_storage | inputs) if reuse else {}
    renamed = {base: out for out, base in inplace.items()}

    def current(name: str) -> str:
        """The buffer that holds `name`'s storage last (itself unless scatters take it over)."""
        while name in renamed:
            name = renamed[name]
        return name

    plan: ReusePlan | None = None
    if reuse:
        lifetimes = []
        for b in [w for st in steps for w in step_writes(st)]:
            if b in inplace:
                continue  # its storage's lifetime is its base's
            buf = buffers[b]
            extent = sympy.sympify(buf.layout.storage_extent())
            pool = f"{buf.layout.device}/{buf.layout.dtype}"
            if isinstance(extent, sympy.Integer):
                nbytes = int(extent) * buf.layout.dtype.itemsize
            else:  # symbolic: reuse only between buffers of the very same size expression
                pool += f"/{extent}"
                hinted = sympy.sympify(extent.xreplace(g.symbol_hints))
                nbytes = int(hinted) * buf.layout.dtype.itemsize if hinted.is_Integer else 1
            lifetimes.append(BufferLifetime(b, nbytes, first[b], last[current(b)], pool))
        plan = plan_reuse(lifetimes)
    live_storage: dict[str, str] = {}  # buffer -> storage owner variable
    freed_by_step: dict[int, list[str]] = {}
    for b, e in last.items():
        if b not in out_storage and e < n:
            freed_by_step.setdefault(e, []).append(b)
    taken: set[str] = set()
    if plan is not None:
        taken = {current(d) for b, d in plan.storage.items() if d != b and b in allocated}
    views_done: set[str] = set()
    fallback_ops: list[str] = []
    blockers: dict[int, str] = {}
    device = graph_device(g)

    def ref(t: Any) -> Any:
        if isinstance(t, ReinterpretView):
            if t.name not in views_done:
                lines.append(View(t.name, t.base.name, ints(t.layout.size), ints(t.layout.stride), ints([t.layout.offset])[0]))
                views_done.add(t.name)
                step_views.append(t.name)
            return Ref(t.name)
        if isinstance(t, Buffer):
            return Ref(t.name)
        if isinstance(t, list):
            return [ref(x) for x in t]
        if isinstance(t, tuple):
            return tuple(ref(x) for x in t)
        if isinstance(t, dict):
            return {k: ref(v) for k, v in t.items()}
        if isinstance(t, sympy.Expr):
            return ints([t])[0]
        if isinstance(t, torch.SymInt):  # a size the graph returns (a forward's SymInt outputs)
            return ints([t.node.expr])[0]
        return t

    def place(buf: Buffer) -> bool:
        """Allocate a kernel-written buffer, or take over its donor's storage per the plan (or
        its base's, for a Scatter in place); True when it took a donor's storage."""
        size, stride = ints(buf.layout.size), ints(buf.layout.stride)
        if buf.name in inplace:
            donor = inplace[buf.name]
        else:
            donor = current(plan.storage.get(buf.name, buf.name)) if plan is not None else buf.name
        if donor != buf.name and donor in live_storage:
            lines.append(Reuse(buf.name, donor, size, stride))
            live_storage[buf.name] = live_storage.pop(donor)
            return True
        lines.append(Allocate(buf.name, size, stride, buf.layout.dtype, buf.layout.device))
        live_storage[buf.name] = buf.name
        return False

    step_views: list[str] = []
    for inp in g.inputs:  # inputs no step reads and nobody returns: drop them at once
        if isinstance(inp, InputBuffer) and inp.name not in last:
            lines.append(Free(inp.name))
    for i, st in enumerate(steps):
        views_done.clear()  # a view variable lives for one step only (it would keep its base alive)
        step_views.clear()
        if isinstance(st, KernelGroup | Scatter):
            took = {w: place(buffers[w]) for w in step_writes(st)}
            if isinstance(st, KernelGroup):
                parts = [st.name]
            elif st.output.name in inplace and took[st.output.name]:  # the base's values are there
                parts = [f"{st.name}_scatter"]
            else:
                parts = [f"{st.name}_init", f"{st.name}_scatter"]
            for kname in parts:
                ln = launches[kname]
                lines.append(KernelCall(ln.name, (*ints([ln.grid]), 1, 1), ln.pointer_args, ints(ln.size_args)))
        else:
            if st.fallback:
                fallback_ops.append(str(st.kernel))
            # results nothing reads are not laid out (ATen may return them other than the meta
            # function says: embedding_bag's offset2bag is empty on some CPU paths)
            unused = set(freed_by_step.get(i, []))
            expect = tuple((b.name, ints(b.layout.size), ints(b.layout.stride)) for b in st.outputs
                           if b.name not in unused)
            results = ref(st.results) if st.results is not None else None
            call = ExternCall(op_name(st.kernel), ref(st.args), tuple((k, ref(v)) for k, v in st.kwargs.items()),
                              results, expect if st.fallback else ())
            why = capture_blocker(st, device)
            if why is not None:
                blockers[len(lines)] = why
            lines.append(call)
            for w in step_writes(st):
                live_storage[w] = w
        lines.extend(Free(v) for v in step_views)
        for b in freed_by_step.get(i, []):
            if b in taken and b not in inputs:
                continue  # its storage lives on under a new name
            if b in constants:
                continue  # captured by the wrapper for its whole life
            if b in live_storage or b in inputs:
                lines.append(Free(b))
                live_storage.pop(b, None)
    views_done.clear()
    outs = tuple(ref(o) for o in g.outputs)
    lines.append(Return(outs))
    return WrapperProgram(lines, constants, plan, fallback_ops, blockers)
