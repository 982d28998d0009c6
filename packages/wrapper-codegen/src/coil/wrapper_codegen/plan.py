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
    LoweredGraph,
    ObjectInput,
    ReinterpretView,
    Scatter,
    SymbolInput,
)
from coil.memory_planner import Block, BufferLifetime, ReusePlan, live_lower_bound, plan_reuse
from coil.scheduler import KernelGroup, Schedule, in_flight_reads
from coil.scheduler.capture import capture_blockers
from coil.scheduler.ordering import step_reads, step_writes
from coil.wrapper_codegen.arena import ArenaBuffer, ArenaPlan, plan_arenas
from coil.wrapper_codegen.inplace import (
    inplace_pointwise,
    inplace_scatters,
    kernel_stores,
    storage_root,
)
from coil.wrapper_codegen.lines import (
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
    Unpack,
    View,
    arena_view,
)
from coil.wrapper_codegen.symbols import check_bound


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
    `arenas` are the arenas the program places buffers in (`build(..., arena=True)`), and
    `arena_peak_delta` is how many bytes they add to the peak of live storage (an arena is held
    whole from its first buffer's step to its last one's). `inplace` maps each output written in
    place to the buffer whose storage it took (`coil.wrapper_codegen.inplace`).
    """

    lines: list[Line]
    constants: dict[str, Any]  # tensors, and the modules higher-order ops take (`module_constant`)
    reuse: ReusePlan | None = None
    fallback_ops: list[str] = field(default_factory=list)
    blockers: dict[int, str] = field(default_factory=dict)
    arenas: list[ArenaPlan] = field(default_factory=list)
    arena_peak_delta: int = 0
    inplace: dict[str, str] = field(default_factory=dict)


def build(sched: Schedule, launches: dict[str, KernelLaunch], *, reuse: bool = True,
          check_inputs: bool = False, arena: bool = False) -> WrapperProgram:
    """Wrapper IR for `sched`; `launches` maps each kernel group name to its launch facts.

    The steps: bind the inputs (`_input_lines`), find each buffer's first and last step
    (`_Lifetimes`), plan storage reuse and in-place outputs (`_Builder.plan_storage`), then per
    step place its outputs, emit its call and free what dies there (`_Builder.step`), and return.

    With `check_inputs`, a CheckInput line per tensor input (after the sizes are bound, before
    any step) makes the wrapper raise ValueError on an input of another shape, stride, dtype or
    device than the graph was compiled for, so no kernel runs on memory it was not made for.
    Leave it off where the caller already guards inputs (Dynamo does).

    With `arena` (and `reuse`), the storage the wrapper allocates for kernels' stores of static
    size that no graph output shares is packed into one arena per device (`arena.plan_arenas`):
    Arena before the first such buffer's step, a Place per buffer, the arena's Free after the last
    one's last step. Not when an extern cannot be captured (the program is then cut into CUDA-graph
    segments, each of which must own what it allocates).

    An extern defining data-dependent sizes binds them right after its call (`ExternCall.binds`,
    its scalar result); a size symbol any line uses before a line binds it raises
    DynamicShapeError (`check_bound`).
    """
    g = sched.graph
    lines = _input_lines(g, check_inputs)
    constants: dict[str, Any] = {c.name: c.value for c in g.constants if isinstance(c, ConstantBuffer) and c.value is not None}
    builder = _Builder(sched, launches, lines, constants)
    if reuse:
        builder.plan_storage(arena and not builder.step_blockers)
    builder.free_unread_inputs()
    for i, st in enumerate(sched.steps):
        builder.step(i, st)
    builder.views_done.clear()
    lines.append(Return(tuple(builder.ref(o) for o in g.outputs)))
    check_bound(lines)
    return WrapperProgram(lines, constants, builder.plan, builder.fallback_ops, builder.blockers, builder.arenas,
                          builder.arena_peak_delta, builder.inplace)


def _input_lines(g: LoweredGraph, check_inputs: bool) -> list[Line]:
    """Unpack the inputs, bind each size symbol first seen in an input's shape (SizeOf), and,
    with `check_inputs`, check every tensor input (CheckInput)."""
    lines: list[Line] = []
    names: list[str | None] = [
        b.name if isinstance(b, InputBuffer | ObjectInput) else b.symbol.name if isinstance(b, SymbolInput) else None
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
    return lines


# ops whose result is, at run time, their first argument itself, though their schema declares
# no alias (their FakeTensor has a storage of its own): a functional collective's wait returns the
# tensor the collective fills
RETURNS_FIRST_ARGUMENT = frozenset({"_c10d_functional::wait_tensor"})
# ops whose j-th result is, at run time, the j-th tensor of their first (list) argument: the wait
# for a coalesced collective's results
RETURNS_ITS_ARGUMENTS = frozenset({"_c10d_functional::wait_tensors"})


def _aliased_argument(op: torch._ops.OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The argument `op`'s results alias (None: they own their storage): the first argument of a
    RETURNS_FIRST_ARGUMENT op, else the argument in the alias set the schema gives a result."""
    schema = op._schema
    if schema.name in RETURNS_FIRST_ARGUMENT:
        return args[0] if args else None
    sets = {s for r in schema.returns if r.alias_info is not None for s in r.alias_info.before_set}
    for i, a in enumerate(schema.arguments):
        if a.alias_info is not None and sets & set(a.alias_info.before_set):
            return args[i] if i < len(args) else kwargs.get(a.name)
    return None


def _storage_name(x: Any) -> str | None:
    """The storage buffer's name of an argument that is a graph buffer or a view of one, else None."""
    return x.storage.name if isinstance(x, Buffer | ReinterpretView) else None


def _aliasing_results(steps: Sequence[Any]) -> dict[str, str | None]:
    """Results of ATen calls that alias an argument, each with that argument's storage buffer
    (None where it is no buffer of the graph): a view op run through ATen, e.g. a slice at a
    data-dependent start, `wait_tensor`, or each result of `wait_tensors` (the tensor of its
    list at that position). Their storage is the argument's."""
    out: dict[str, str | None] = {}
    for st in steps:
        op = getattr(st, "kernel", None)
        if isinstance(st, KernelGroup | Scatter) or not isinstance(op, torch._ops.OpOverload):
            continue
        if op._schema.name in RETURNS_ITS_ARGUMENTS:
            bases = st.args[0] if st.args and isinstance(st.args[0], list | tuple) else ()
            for b, base in zip(st.outputs, bases, strict=False):
                out[b.name] = _storage_name(base)
            continue
        aliasing = any(r.alias_info is not None for r in op._schema.returns)
        if aliasing or op._schema.name in RETURNS_FIRST_ARGUMENT:
            storage = _storage_name(_aliased_argument(op, st.args, st.kwargs))
            out.update((b.name, storage) for b in st.outputs)
    return out


@dataclass
class _Lifetimes:
    """Step of each buffer's first write and last read (`n`, one past the last step, for the
    storages the graph returns); a result nobody reads dies right after the step making it."""

    first: dict[str, int]
    last: dict[str, int]
    out_storage: set[str]

    @staticmethod
    def of(steps: Sequence[Any], g: LoweredGraph) -> _Lifetimes:
        first: dict[str, int] = {}
        last: dict[str, int] = {}
        for i, st in enumerate(steps):
            for r in step_reads(st):
                last[r] = i
            for w in step_writes(st):
                first.setdefault(w, i)
        # a collective reads its inputs until its wait returns: they live (and keep their
        # storage from reuse) until the wait step
        for wait, in_flight in in_flight_reads(steps).items():
            for r in in_flight:
                last[r] = max(last.get(r, wait), wait)
        for i, st in enumerate(steps):
            for w in step_writes(st):
                last.setdefault(w, i)
        out_storage = {o.storage.name for o in g.outputs if isinstance(o, Buffer | ReinterpretView)}
        for o in out_storage:
            last[o] = len(steps)
        # a result aliasing an argument keeps the argument's storage alive as long as itself
        aliases = _aliasing_results(steps)
        for result in aliases:
            base = storage_root(result, aliases)
            if base is not None:
                last[base] = max(last.get(base, 0), last[result])
        return _Lifetimes(first, last, out_storage)


class _Builder:
    """The state of one `build`: the lines so far, which variable holds which storage, and what
    each step frees."""

    def __init__(self, sched: Schedule, launches: dict[str, KernelLaunch], lines: list[Line],
                 constants: dict[str, Any]) -> None:
        g = sched.graph
        self.g = g
        self.steps = sched.steps
        self.launches = launches
        self.lines = lines
        self.constants = constants
        self.buffers = g.buffers()
        self.life = _Lifetimes.of(self.steps, g)
        self.inputs = {b.name for b in g.inputs if isinstance(b, InputBuffer)} | set(constants)
        # only kernel stores are allocated by the wrapper, so only they can take a donor's storage;
        # a donor assigned to an extern result (which ATen allocates) is simply freed as usual
        self.allocated = kernel_stores(self.steps)
        # an extern's result that nothing reads (not even for a size it defines) is dropped where
        # it is made and not laid out: ATen may return no tensor for it (cuDNN attention's
        # logsumexp when not asked to compute it) or one other than its meta function says
        # (embedding_bag's offset2bag is empty on some CPU paths), so it owns no storage the plan
        # could hand on
        self.unread = {w for i, st in enumerate(self.steps) if not isinstance(st, KernelGroup | Scatter)
                       for w in set(step_writes(st)) - {b.source for b in st.bindings}
                       if self.life.last.get(w) == i and w not in self.life.out_storage and w not in self.inputs}
        self.inplace: dict[str, str] = {}  # in-place output -> the buffer whose storage it takes
        self.renamed: dict[str, str] = {}  # base -> scatter output
        self.plan: ReusePlan | None = None
        self.live_storage: dict[str, str] = {}  # buffer -> storage owner variable
        self.freed_by_step: dict[int, list[str]] = {}
        n = len(self.steps)
        for b, e in self.life.last.items():
            if b not in self.life.out_storage and e < n:
                self.freed_by_step.setdefault(e, []).append(b)
        self.taken: set[str] = set()  # buffers whose storage lives on under a new name
        self.views_done: set[str] = set()
        self.step_views: list[str] = []
        self.fallback_ops: list[str] = []
        self.blockers: dict[int, str] = {}
        self.step_blockers = capture_blockers(sched)  # step index -> why a CUDA graph cannot capture it
        # size symbols bound so far (inputs' sizes, extern results) and the asserts that a
        # symbol defined twice asks for
        self.bound: set[str] = {line.name for line in lines if isinstance(line, SizeOf)}
        self.bound |= {b.symbol.name for b in g.inputs if isinstance(b, SymbolInput)}
        self.checks: list[tuple[str, str]] = []
        self.arenas: list[ArenaPlan] = []
        self.arena_of: dict[str, ArenaPlan] = {}  # placed buffer -> its arena
        self.arena_peak_delta = 0

    def current(self, name: str) -> str:
        """The buffer that holds `name`'s storage last (itself unless scatters take it over)."""
        while name in self.renamed:
            name = self.renamed[name]
        return name

    def plan_storage(self, arena: bool = False) -> None:
        """Storage reuse: in-place outputs (a Scatter whose base dies at it, or a pointwise
        kernel's store over a buffer it reads for the last time, writes into that buffer's
        storage, whose lifetime then runs from its first step to the last of the outputs that
        take it over), with `arena` the arenas (`plan_arena`), then `plan_reuse` over every other
        buffer's lifetime."""
        life = self.life
        aliases = _aliasing_results(self.steps)
        kept = life.out_storage | self.inputs
        self.inplace = inplace_scatters(self.steps, self.buffers, life.last, kept)
        if not self.step_blockers:  # cut into CUDA-graph segments, a segment would write over its input
            self.inplace |= inplace_pointwise(self.steps, self.buffers, life.last, kept, aliases)
        self.renamed = {base: out for out, base in self.inplace.items()}
        lifetimes = []
        static: set[str] = set()
        for b in [w for st in self.steps for w in step_writes(st)]:
            if b in self.inplace:
                continue  # its storage's lifetime is its base's
            if b in aliases or b in self.unread:
                continue  # a view of an argument's storage, or no storage: not the wrapper's to hand on
            buf = self.buffers[b]
            extent = sympy.sympify(buf.layout.storage_extent())
            pool = f"{buf.layout.device}/{buf.layout.dtype}"
            if isinstance(extent, sympy.Integer):
                nbytes = int(extent) * buf.layout.dtype.itemsize
                static.add(b)
            else:  # symbolic: reuse only between buffers of the very same size expression
                pool += f"/{extent}"
                hinted = sympy.sympify(extent.xreplace(self.g.symbol_hints))
                nbytes = int(hinted) * buf.layout.dtype.itemsize if hinted.is_Integer else 1
            lifetimes.append(BufferLifetime(b, nbytes, life.first[b], life.last[self.current(b)], pool))
        if arena:
            lifetimes = self.plan_arena(lifetimes, static)
        plan = plan_reuse(lifetimes)
        self.plan = plan
        self.taken = {self.current(d) for b, d in plan.storage.items() if d != b and b in self.allocated}

    def plan_arena(self, lifetimes: list[BufferLifetime], static: set[str]) -> list[BufferLifetime]:
        """Pack into arenas the storages (`lifetimes`) that the wrapper allocates (kernel stores),
        of `static` size, that no graph output shares and that die inside the call; returns the
        other lifetimes, left to reuse mode. Also sets `arena_peak_delta` over all of them."""
        n = len(self.steps)
        placed = [t for t in lifetimes
                  if t.name in self.allocated and t.name in static and t.end < n
                  and self.current(t.name) not in self.life.out_storage]
        if not placed:
            return lifetimes
        self.arenas = plan_arenas([ArenaBuffer(t.name, t.size, t.start, t.end, self.buffers[t.name].layout.device,
                                               self.buffers[t.name].layout.dtype) for t in placed])
        for a in self.arenas:
            self.arena_of.update((b, a) for b in a.offsets)
        rest = [t for t in lifetimes if t.name not in self.arena_of]
        before = live_lower_bound(Block(t.name, t.start, t.end + 1, t.size) for t in lifetimes)
        after = live_lower_bound([*(Block(t.name, t.start, t.end + 1, t.size) for t in rest),
                                  *(Block(a.name, a.first, a.last + 1, a.nbytes) for a in self.arenas)])
        self.arena_peak_delta = after - before
        return rest

    def ref(self, t: Any) -> Any:
        """An argument tree with buffers as Refs (a view's View line emitted once per step) and
        sizes as ints or size expressions."""
        if isinstance(t, ReinterpretView):
            if t.name not in self.views_done:
                self.lines.append(View(t.name, t.base.name, ints(t.layout.size), ints(t.layout.stride),
                                       ints([t.layout.offset])[0]))
                self.views_done.add(t.name)
                self.step_views.append(t.name)
            return Ref(t.name)
        if isinstance(t, Buffer | ObjectInput):
            return Ref(t.name)
        if isinstance(t, list):
            return [self.ref(x) for x in t]
        if isinstance(t, tuple):
            return tuple(self.ref(x) for x in t)
        if isinstance(t, dict):
            return {k: self.ref(v) for k, v in t.items()}
        if isinstance(t, sympy.Expr):
            return ints([t])[0]
        if isinstance(t, torch.SymInt):  # a size the graph returns (a forward's SymInt outputs)
            return ints([t.node.expr])[0]
        if isinstance(t, torch.nn.Module):  # a higher-order op's subgraph (cond's branches, a combine function)
            return Ref(self.module_constant(t))
        return t

    def module_constant(self, module: torch.nn.Module) -> str:
        """The constant that passes `module` to the extern calls that take it (one per module)."""
        for name, value in self.constants.items():
            if value is module:
                return name
        name = f"subgraph{sum(isinstance(v, torch.nn.Module) for v in self.constants.values())}"
        self.constants[name] = module
        return name

    def place(self, buf: Buffer) -> bool:
        """Allocate a kernel-written buffer, or take over its donor's storage per the plan (or
        its base's, for a Scatter in place); True when it took a donor's storage."""
        size, stride = ints(buf.layout.size), ints(buf.layout.stride)
        if buf.name in self.inplace:
            donor = self.inplace[buf.name]
        else:
            donor = self.current(self.plan.storage.get(buf.name, buf.name)) if self.plan is not None else buf.name
        if donor != buf.name and donor in self.live_storage:
            self.lines.append(Reuse(buf.name, donor, size, stride))
            self.live_storage[buf.name] = self.live_storage.pop(donor)
            return True
        arena = self.arena_of.get(buf.name)
        if arena is not None:
            if arena.name not in self.live_storage:
                self.lines.append(Arena(arena.name, arena.nbytes, arena.device, arena.dtypes))
                self.live_storage[arena.name] = arena.name
            self.lines.append(Place(buf.name, arena.name, arena.offsets[buf.name], size, stride, buf.layout.dtype))
            self.live_storage[buf.name] = buf.name
            return False
        self.lines.append(Allocate(buf.name, size, stride, buf.layout.dtype, buf.layout.device))
        self.live_storage[buf.name] = buf.name
        return False

    def free_unread_inputs(self) -> None:
        """Inputs no step reads and nobody returns: dropped at once."""
        for inp in self.g.inputs:
            if isinstance(inp, InputBuffer) and inp.name not in self.life.last:
                self.lines.append(Free(inp.name))

    def step(self, i: int, st: Any) -> None:
        """Step `i`: its call, then Free lines for its views and for what dies at it."""
        self.views_done.clear()  # a view variable lives for one step only (it would keep its base alive)
        self.step_views.clear()
        if isinstance(st, KernelGroup | Scatter):
            self.kernel_step(st)
        else:
            self.extern_step(i, st)
        self.lines.extend(Free(v) for v in self.step_views)
        for b in self.freed_by_step.get(i, []):
            if b in self.taken and b not in self.inputs:
                continue  # its storage lives on under a new name
            if b in self.constants:
                continue  # captured by the wrapper for its whole life
            if b in self.live_storage or b in self.inputs:
                self.lines.append(Free(b))
                self.live_storage.pop(b, None)
        for a in self.arenas:
            if a.last == i:  # its last buffer died at this step
                self.lines.extend(Free(arena_view(a.name, d)) for d in a.dtypes)
                self.lines.append(Free(a.name))
                self.live_storage.pop(a.name, None)

    def kernel_step(self, st: KernelGroup | Scatter) -> None:
        """Place the outputs, then launch the group's kernel (a Scatter: its init copy, unless it
        writes in place over its base's values, then the scatter)."""
        took = {w: self.place(self.buffers[w]) for w in step_writes(st)}
        # a store that took a buffer the kernel reads (in place): that buffer's name is gone,
        # the store's variable is the same memory in the same layout
        moved = {self.inplace[w]: w for w, t in took.items() if t and w in self.inplace}
        if isinstance(st, KernelGroup):
            parts = [st.name]
        elif st.output.name in self.inplace and took[st.output.name]:  # the base's values are there
            parts = [f"{st.name}_scatter"]
        else:
            parts = [f"{st.name}_init", f"{st.name}_scatter"]
        for kname in parts:
            ln = self.launches[kname]
            args = tuple(moved.get(a, a) for a in ln.pointer_args)
            self.lines.append(KernelCall(ln.name, (*ints([ln.grid]), 1, 1), args, ints(ln.size_args)))

    def extern_step(self, i: int, st: Any) -> None:
        """The ATen call (fallback layouts enforced on results something reads; a capture blocker
        recorded); its results own fresh storage."""
        if st.fallback:
            self.fallback_ops.append(str(st.kernel))
        results = self.result_refs(st.results)
        binds = tuple(BindSymbol(self.bind_name(b.symbol.name), b.source, b.attr, b.dim, b.divisor)
                      for b in st.bindings)
        # a symbol this call defines again is laid out by its own value here; the check follows
        again = dict(self.checks)

        def own(e: Any) -> Any:
            e = sympy.sympify(e)
            return e.xreplace({s: sympy.Symbol(again[s.name], integer=True) for s in e.free_symbols if s.name in again})

        expect = tuple((b.name, ints([own(e) for e in b.layout.size]), ints([own(e) for e in b.layout.stride]))
                       for b in st.outputs if b.name not in self.unread)
        call = ExternCall(op_name(st.kernel), self.ref(st.args), tuple((k, self.ref(v)) for k, v in st.kwargs.items()),
                          results, expect if st.fallback else (), binds)
        why = self.step_blockers.get(i)
        if why is not None:
            self.blockers[len(self.lines)] = why
        self.lines.append(call)
        self.lines.extend(self.symbol_checks())
        for w in step_writes(st):
            if w not in self.unread:
                self.live_storage[w] = w

    def result_refs(self, results: Any) -> Any:
        """An extern's results as the wrapper's names: Refs for buffers and for a scalar result
        (a sympy Symbol: the variable of that name), None for unused ones."""
        if isinstance(results, Buffer):
            return None if results.name in self.unread else Ref(results.name)
        if isinstance(results, sympy.Symbol):
            return Ref(self.bind_name(results.name))
        if isinstance(results, list | tuple):
            return type(results)(self.result_refs(r) for r in results)
        return None

    def bind_name(self, symbol: str) -> str:
        """The variable a newly defined size symbol is bound to: the symbol's own name, or,
        when an earlier line bound it already (two ATen calls define one symbol), a fresh name
        that `checks` then compares with the first value (a run-time assert, as torch's)."""
        if symbol not in self.bound:
            self.bound.add(symbol)
            return symbol
        again = f"{symbol}_again{len(self.checks)}"
        self.checks.append((symbol, again))
        return again

    def symbol_checks(self) -> list[Line]:
        """The asserts `bind_name` asked for since the last call."""
        out: list[Line] = []
        for symbol, again in self.checks:
            same = sympy.Eq(sympy.Symbol(symbol, integer=True), sympy.Symbol(again, integer=True))
            out.append(ExternCall(op_name(torch.ops.aten._assert_scalar.default),
                                  (same, f"the size {symbol} differs between the ATen calls defining it"), (), None, ()))
        self.checks.clear()
        return out
