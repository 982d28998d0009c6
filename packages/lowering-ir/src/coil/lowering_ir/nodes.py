"""The loop-level IR: buffers, views and the operations that fill buffers.

A `LoweredGraph` is the lowering of one functional ATen FX graph:
- `inputs`: one `InputBuffer` per placeholder (tensors), `SymbolInput` (sizes) or
  `ObjectInput` (opaque objects);
- `operations`: Pointwise, Reduction and ExternKernel nodes in a valid (topological) order;
  each writes exactly the buffers it lists in `outputs`;
- `outputs`: per graph output, a `TensorRef` (buffer or view), or a Python constant.

Invariant: every buffer read by an operation is an input, a constant, or written by an earlier
operation; every buffer has exactly one writer (`copy_` into an input is the only mutation, done
by an ExternKernel whose `mutates` names the input).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import sympy
import torch
from coil.lowering_ir.layout import Expr, Layout
from coil.lowering_ir.values import Load, Value, loads


@dataclass(eq=False)
class Buffer:
    """A tensor that owns its memory (or, for an input, is handed in)."""

    name: str
    layout: Layout

    @property
    def storage(self) -> Buffer:
        return self

    @property
    def nbytes_expr(self) -> Expr:
        return self.layout.storage_extent() * self.layout.dtype.itemsize


@dataclass(eq=False)
class InputBuffer(Buffer):
    """A graph input tensor (placeholder `index` of the FX graph)."""

    index: int = 0


@dataclass(eq=False)
class ConstantBuffer(Buffer):
    """A tensor attribute of the GraphModule (get_attr), captured by the compiled callable."""

    value: torch.Tensor | None = None


@dataclass(eq=False)
class ComputedBuffer(Buffer):
    """A buffer written by one operation."""


@dataclass(eq=False)
class ReinterpretView:
    """A view of `base` with its own layout (offset relative to the base buffer)."""

    name: str
    base: Buffer
    layout: Layout

    @property
    def storage(self) -> Buffer:
        return self.base


TensorRef = Buffer | ReinterpretView


def load(ref: TensorRef, idx: Sequence[Expr]) -> Load:
    """The Value reading `ref` at logical position `idx`."""
    return Load(ref.storage.name, _expanded_index(ref.layout, tuple(idx)), ref.layout.dtype)


@functools.lru_cache(maxsize=1 << 14)
def _expanded_index(layout: Layout, idx: tuple[Expr, ...]) -> Expr:
    """`expand(layout.index(idx))`, memoised: lowering loads the same layouts at the same loop
    indices many times (layouts and sympy expressions are immutable and hashable)."""
    return sympy.expand(layout.index(idx))


@dataclass(frozen=True)
class SymbolInput:
    """A graph input that is a size (SymInt): its symbol is bound at run time."""

    index: int
    symbol: sympy.Symbol


@dataclass(frozen=True)
class ObjectInput:
    """A graph input that is an opaque object (a torchbind or registered opaque type, a
    FakeScriptObject while tracing: a DTensor's DeviceMesh): the wrapper binds it to `name` and
    hands it on at run time to the calls and outputs that use it, never as a value of tracing."""

    index: int
    name: str


@dataclass(eq=False)
class Operation:
    """Base of everything that writes buffers. `origins` are the FX node names it came from."""

    name: str
    origins: tuple[str, ...]

    @property
    def outputs(self) -> list[Buffer]:
        raise NotImplementedError

    def reads(self) -> list[str]:
        """Names of the storage buffers this operation reads."""
        raise NotImplementedError


def _body_reads(op: Operation, body: Value) -> list[str]:
    """The storage buffers `body` loads, in first-visit order; memoised on `op` for as long as
    its body is the same object (Values are immutable; a pass that rewrites an operation gives
    it a new body). The scheduler asks every operation for its reads at every fusion attempt."""
    memo = op.__dict__.get("_reads_memo")
    if memo is None or memo[0] is not body:
        memo = op.__dict__["_reads_memo"] = (body, tuple(dict.fromkeys(ld.buffer for ld in loads(body))))
    return list(memo[1])


@dataclass(eq=False)
class Pointwise(Operation):
    """output[p] = body(p) for p in product(ranges); body's symbols are p0..p{n-1}."""

    output: ComputedBuffer
    ranges: tuple[Expr, ...]
    body: Value
    store_index: Expr

    @property
    def outputs(self) -> list[Buffer]:
        return [self.output]

    def reads(self) -> list[str]:
        return _body_reads(self, self.body)


REDUCTION_TYPES = ("sum", "prod", "max", "min", "any", "all", "argmax", "argmin", "cumsum", "cumprod")
SCAN_TYPES = ("cumsum", "cumprod")


@dataclass(eq=False)
class Reduction(Operation):
    """output[p] = reduce(reduction_type, body(p, r) for r in product(reduction_ranges)).

    Symbols p0.. index `ranges`, r0.. index `reduction_ranges`. The reduction accumulates in
    `acc_dtype` and the result is cast to the output buffer's dtype. "argmax"/"argmin" give the
    row-major position over `reduction_ranges` of the first extreme value (int64).
    Scans ("cumsum", "cumprod") store one value per (p, r): their `store_index` uses both.
    """

    output: ComputedBuffer
    ranges: tuple[Expr, ...]
    reduction_ranges: tuple[Expr, ...]
    reduction_type: str
    body: Value
    store_index: Expr
    acc_dtype: torch.dtype

    def __post_init__(self) -> None:
        if self.reduction_type not in REDUCTION_TYPES:
            raise ValueError(f"unknown reduction {self.reduction_type!r}")

    @property
    def outputs(self) -> list[Buffer]:
        return [self.output]

    def reads(self) -> list[str]:
        return _body_reads(self, self.body)


@dataclass(eq=False)
class Scatter(Operation):
    """output = copy of `base` (zeros when None), then for p in product(ranges):
    output[target] (+)= value(p).

    `target` is a Load of `output` whose index (and indirect bindings, mask) say where point p
    writes; `accumulate` adds (atomically: duplicates accumulate, as index_put(accumulate=True)
    and scatter_add do), otherwise stores (duplicates: one of them wins, as in eager).
    """

    output: ComputedBuffer
    base: Buffer | ReinterpretView | None
    ranges: tuple[Expr, ...]
    target: Load
    value: Value
    accumulate: bool

    @property
    def outputs(self) -> list[Buffer]:
        return [self.output]

    def reads(self) -> list[str]:
        names = [self.base.storage.name] if self.base is not None else []
        for v in (self.value, *[val for _, val in self.target.indirect]):
            names += [ld.buffer for ld in loads(v)]  # loads(v) includes v itself when v is a Load
        if self.target.mask is not None:
            names += [ld.buffer for ld in loads(self.target.mask)]
        return [n for n in dict.fromkeys(names) if n != self.output.name]


@dataclass(frozen=True)
class SymbolBinding:
    """Unbacked size symbol `symbol` takes its value, at run time, from a result of the extern
    that defines it: `source` names the result (a buffer, or the scalar result's symbol), `attr`
    what is read of it: "value" (the scalar), "int" (a bool scalar as 0/1), "size" or "stride"
    (of dim `dim`) or "storage_offset"; the value read is then divided (exactly) by `divisor`.
    (torch's unbacked_bindings key paths, resolved against the results.)"""

    symbol: sympy.Symbol
    source: str
    attr: str
    dim: int = 0
    divisor: int = 1

    def __post_init__(self) -> None:
        if self.attr not in ("value", "int", "size", "stride", "storage_offset"):
            raise ValueError(f"SymbolBinding of {self.symbol}: unknown attr {self.attr!r}")


@dataclass(eq=False)
class ExternKernel(Operation):
    """A call of an ATen op (`kernel`) on tensors and constants.

    `args`/`kwargs` hold TensorRefs where tensors go, sympy expressions where sizes go. `results`
    mirrors the op's return value: a TensorRef-producing structure where each returned tensor is
    a ComputedBuffer (or None for results nobody uses), or a sympy Symbol for an op that returns
    a scalar (`_local_scalar_dense`: the wrapper binds a variable of the symbol's name to it).
    `fallback` is True when coil has no native lowering for the op. `mutates` names input
    buffers the op writes in place (only `copy_` epilogues). `bindings` define the unbacked
    symbols (data-dependent sizes) this call's results determine; no operation before it may
    use them.
    """

    kernel: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    results: Any
    fallback: bool
    mutates: tuple[str, ...] = ()
    bindings: tuple[SymbolBinding, ...] = ()

    def defined_symbols(self) -> set[sympy.Symbol]:
        """The symbols this call binds: its scalar result and its bindings'."""
        out = {b.symbol for b in self.bindings}
        if isinstance(self.results, sympy.Symbol):
            out.add(self.results)
        return out

    @property
    def outputs(self) -> list[Buffer]:
        out: list[Buffer] = []

        def walk(x: Any) -> None:
            if isinstance(x, Buffer):
                out.append(x)
            elif isinstance(x, list | tuple):
                for y in x:
                    walk(y)

        walk(self.results)
        return out

    def tensor_args(self) -> list[TensorRef]:
        found: list[TensorRef] = []

        def walk(x: Any) -> None:
            if isinstance(x, Buffer | ReinterpretView):
                found.append(x)
            elif isinstance(x, list | tuple):
                for y in x:
                    walk(y)
            elif isinstance(x, dict):
                for y in x.values():
                    walk(y)

        walk(self.args)
        walk(self.kwargs)
        return found

    def reads(self) -> list[str]:
        return list(dict.fromkeys(t.storage.name for t in self.tensor_args()))


def used_symbols(x: Any) -> set[sympy.Symbol]:
    """The size symbols anywhere in an operation (ranges, layouts, index expressions, body
    values, scalar arguments), a value, a layout or a tree of them."""
    out: set[sympy.Symbol] = set()
    seen: set[int] = set()

    def walk(y: Any) -> None:
        if isinstance(y, sympy.Basic):
            out.update(s for s in y.free_symbols if isinstance(s, sympy.Symbol))
        elif isinstance(y, list | tuple):
            for z in y:
                walk(z)
        elif isinstance(y, dict):
            for z in y.values():
                walk(z)
        elif hasattr(y, "__dataclass_fields__") and id(y) not in seen and not isinstance(y, torch.Tensor):
            seen.add(id(y))
            for f in y.__dataclass_fields__:
                walk(getattr(y, f))

    walk(x)
    return out


@dataclass(eq=False)
class LoweredGraph:
    """One lowered FX graph. See the module docstring for the invariants."""

    name: str
    inputs: list[InputBuffer | SymbolInput | ObjectInput | None]
    constants: list[ConstantBuffer]
    operations: list[Operation]
    outputs: list[Any]
    views: list[ReinterpretView] = field(default_factory=list)
    symbol_hints: dict[sympy.Symbol, int] = field(default_factory=dict)  # example value of each size symbol

    def buffers(self) -> dict[str, Buffer]:
        """Every buffer by name: inputs, constants and operation outputs."""
        out: dict[str, Buffer] = {b.name: b for b in self.inputs if isinstance(b, InputBuffer)}
        out.update({c.name: c for c in self.constants})
        for op in self.operations:
            out.update({b.name: b for b in op.outputs})
        return out

    def verify(self) -> None:
        """Check the module invariants; raise ValueError naming the operation at fault."""
        known = {b.name for b in self.inputs if isinstance(b, InputBuffer)}
        known |= {c.name for c in self.constants}
        for op in self.operations:
            for r in op.reads():
                if r not in known:
                    raise ValueError(f"{op.name} (from {op.origins}) reads {r} before it is written")
            for b in op.outputs:
                if b.name in known:
                    raise ValueError(f"{op.name} writes {b.name}, which already has a writer")
                known.add(b.name)
