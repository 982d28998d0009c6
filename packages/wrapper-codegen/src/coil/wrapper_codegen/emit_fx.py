"""Emit a Wrapper IR program as a torch.fx graph: the same program as `emit_python`, as nodes.

One FX node (or a few) per Line, in order, covering every Line type:

| Line         | FX nodes                                                                   |
|--------------|----------------------------------------------------------------------------|
| Unpack       | one `placeholder` per graph input (`unused<i>` where the name is None)     |
| SizeOf       | `call_method size(tensor, dim)`                                            |
| CheckInput   | `call_function check_input(tensor, index, size, stride, dtype, device)`    |
| Allocate     | `call_function torch.empty_strided(size, stride, dtype=, device=)`         |
| Arena        | `call_function torch.empty_strided((nbytes,), (1,), dtype=torch.uint8,     |
|              | device=)`, `call_function typed(arena, dtype)` per dtype                   |
| Place        | `call_function place(typed arena, size, stride, offset in elements)`       |
| Reuse        | `call_function reuse(donor, size, stride)` (the donor's name is then dead) |
| View         | `call_function view(base, size, stride, offset)`                           |
| KernelCall   | `get_attr k_<kernel>` (once), `call_function launch(kernel, grid, *args)`  |
| ExternCall   | `call_function <the ATen op>(*args, **kwargs)`, `getitem` per named result, |
|              | per `binds` entry the read (`call_method size/stride/storage_offset`,      |
|              | `int`, `floordiv`), `call_function ensure_layout(result, size, stride)`    |
|              | per `expect` entry                                                         |
| Free         | `call_function free(value)` (after it the name is dead)                    |
| Return       | `output`                                                                   |
| Track        | `get_attr _coil_track` (once), `call_function track(tracker, event, *names)`|
|              | (`place` also passes the two tensors)                                      |

Size expressions (sympy, dynamic shapes) become `operator` nodes over the size symbols' nodes
(`min`, `max` and a Piecewise's `ite(cond, then, else)` call nodes).
A name that no line binds is a graph constant: a `get_attr` of that name.

`launch`, `free`, `track` and `check_input` are marked side-effectful (`torch.fx.node.has_side_effect`), so dead-code
elimination keeps them, and the FX code generator drops each value after its last use: a `free`
node is where the Python wrapper's `del` is. Differences from the Python wrapper: inputs are
positional arguments (not a boxed list cleared on entry, so inputs are not freed early), and the
module is for inspection and testing (the backend executes the Python wrapper).
"""

from __future__ import annotations

import builtins
import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import sympy
import torch
import torch.fx
from coil.lowering_ir.printing import pyexpr
from coil.wrapper_codegen.helpers import check_input, ensure_layout
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

__all__ = ["emit_fx", "emit_fx_graph"]


# -- the run-time helpers FX nodes call (module level, so FX code can import them) -------------


@torch.fx.node.has_side_effect
def launch(kernel: Callable[..., None], grid: tuple[int, ...], *args: object) -> None:
    """Launch `kernel` (a coil.runtime.Kernel or anything with its call signature) over `grid`."""
    kernel(grid, *args)


@torch.fx.node.has_side_effect
def free(value: object) -> None:
    """Marks where the wrapper drops its reference to `value` (the FX code then deletes it)."""
    del value


@torch.fx.node.has_side_effect
def track(tracker: Any, event: str, *args: object) -> None:
    """Report a lifetime event to `tracker` (Line `Track`): `tracker.<event>(*args)` (the names,
    then for `place` the two tensors)."""
    getattr(tracker, event)(*args)


def typed(arena: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The arena's bytes seen as `dtype` (Line `Arena`)."""
    return arena.view(dtype)


def place(arena: torch.Tensor, size: Sequence[int], stride: Sequence[int], offset: int) -> torch.Tensor:
    """A buffer `offset` elements into the typed arena (Line `Place`)."""
    return torch.as_strided(arena, tuple(size), tuple(stride), offset)


def reuse(donor: torch.Tensor, size: Sequence[int], stride: Sequence[int]) -> torch.Tensor:
    """`donor`'s storage seen with its own size and stride (Line `Reuse`)."""
    return torch.as_strided(donor, tuple(size), tuple(stride), donor.storage_offset())


def view(base: torch.Tensor, size: Sequence[int], stride: Sequence[int], offset: int) -> torch.Tensor:
    """`base` reinterpreted, `offset` relative to base's own offset (Line `View`)."""
    return torch.as_strided(base, tuple(size), tuple(stride), base.storage_offset() + offset)


def ite(cond: object, then: object, other: object) -> object:
    """`then` if `cond` else `other` (a Piecewise size expression)."""
    return then if cond else other


torch.fx.node.has_side_effect(check_input)  # it raises on a bad input: never dead code


def _resolve_op(qualified: str) -> Any:
    """'torch.ops.aten.mm.default' -> the OpOverload (or higher-order op) object."""
    parts = qualified.split(".")
    if parts[:2] != ["torch", "ops"]:
        raise ValueError(f"extern op {qualified!r} is not under torch.ops")
    obj: Any = torch.ops
    for p in parts[2:]:
        obj = getattr(obj, p)
    return obj


class _Emitter:
    def __init__(self) -> None:
        self.graph = torch.fx.Graph()
        self.tracer = torch.fx.proxy.GraphAppendingTracer(self.graph)
        self.env: dict[str, torch.fx.Node] = {}
        self.attrs: dict[str, torch.fx.Node] = {}
        self.dead: set[str] = set()

    def node(self, name: str) -> torch.fx.Node:
        if name in self.env:
            return self.env[name]
        if name in self.dead:
            raise ValueError(f"wrapper line uses {name!r} after it was freed or its storage reused")
        return self.attr(name)  # bound by no line: a graph constant

    def attr(self, target: str) -> torch.fx.Node:
        if target not in self.attrs:
            self.attrs[target] = self.graph.get_attr(target)
        return self.attrs[target]

    def size(self, e: sympy.Basic) -> Any:
        """A size expression: an int, or operator nodes over the symbols' nodes."""
        e = sympy.sympify(e)
        if isinstance(e, sympy.Integer):
            return int(e)
        proxies = {s.name: torch.fx.Proxy(self.node(s.name), self.tracer) for s in e.free_symbols}

        def minmax(fn: Callable[..., Any]) -> Callable[..., Any]:
            def call(*args: Any) -> Any:
                if not any(isinstance(a, torch.fx.Proxy) for a in args):
                    return fn(*args)
                return self.tracer.create_proxy("call_function", fn, args, {})

            return call

        namespace = {"max": minmax(builtins.max), "min": minmax(builtins.min), "ite": minmax(ite), **proxies}
        value = eval(pyexpr(e, ite="ite"), {"__builtins__": {}}, namespace)
        return value.node if isinstance(value, torch.fx.Proxy) else value

    def arg(self, x: Any) -> Any:
        """An argument tree with Refs as nodes and size expressions as nodes."""
        if isinstance(x, Ref):
            return self.node(x.name)
        if isinstance(x, sympy.Basic):
            return self.size(x)
        if isinstance(x, list):
            return [self.arg(v) for v in x]
        if isinstance(x, tuple):
            return tuple(self.arg(v) for v in x)
        if isinstance(x, dict):
            return {k: self.arg(v) for k, v in x.items()}
        return x

    def bind(self, target: Any, value: torch.fx.Node) -> None:
        """Bind an extern's result tree (Refs, None, nested tuples/lists) to getitem nodes."""
        if target is None:
            return
        if isinstance(target, Ref):
            self.env[target.name] = value
            return
        if isinstance(target, list | tuple):
            for i, t in enumerate(target):
                if t is None:
                    continue
                name = t.name if isinstance(t, Ref) else None
                item = self.graph.create_node("call_function", operator.getitem, (value, i), name=name)
                self.bind(t, item)
            return
        raise TypeError(f"bad result target {target!r}")

    def line(self, ln: Line) -> None:
        g = self.graph
        if isinstance(ln, Unpack):
            for i, name in enumerate(ln.names):
                node = g.placeholder(name if name is not None else f"unused{i}")
                if name is not None:
                    self.env[name] = node
        elif isinstance(ln, SizeOf):
            self.env[ln.name] = g.create_node("call_method", "size", (self.node(ln.tensor), ln.dim), name=ln.name)
        elif isinstance(ln, CheckInput):
            g.create_node("call_function", check_input, (self.node(ln.name), ln.index, self.arg(ln.size),
                                                         self.arg(ln.stride), ln.dtype, ln.device),
                          name=f"check_{ln.name}")
        elif isinstance(ln, Allocate):
            self.env[ln.name] = g.create_node(
                "call_function", torch.empty_strided, (self.arg(ln.size), self.arg(ln.stride)),
                {"dtype": ln.dtype, "device": ln.device}, name=ln.name)
        elif isinstance(ln, Arena):
            arena = self.env[ln.name] = g.create_node(
                "call_function", torch.empty_strided, ((ln.nbytes,), (1,)), {"dtype": torch.uint8, "device": ln.device},
                name=ln.name)
            for d in ln.dtypes:
                name = arena_view(ln.name, d)
                self.env[name] = g.create_node("call_function", typed, (arena, d), name=name)
        elif isinstance(ln, Place):
            self.env[ln.name] = g.create_node(
                "call_function", place, (self.node(arena_view(ln.arena, ln.dtype)), self.arg(ln.size),
                                         self.arg(ln.stride), ln.offset // ln.dtype.itemsize), name=ln.name)
        elif isinstance(ln, Reuse):
            donor = self.node(ln.donor)
            self.env[ln.name] = g.create_node("call_function", reuse, (donor, self.arg(ln.size), self.arg(ln.stride)),
                                              name=ln.name)
            self._kill(ln.donor)
        elif isinstance(ln, View):
            self.env[ln.name] = g.create_node(
                "call_function", view, (self.node(ln.base), self.arg(ln.size), self.arg(ln.stride), self.arg(ln.offset)),
                name=ln.name)
        elif isinstance(ln, KernelCall):
            args = (self.attr(f"k_{ln.kernel}"), self.arg(ln.grid), *[self.node(a) for a in ln.args],
                    *[self.arg(s) for s in ln.sizes])
            g.create_node("call_function", launch, args, name=f"launch_{ln.kernel}")
        elif isinstance(ln, ExternCall):
            result = g.create_node("call_function", _resolve_op(ln.op), self.arg(ln.args),
                                   {k: self.arg(v) for k, v in ln.kwargs},
                                   name=ln.results.name if isinstance(ln.results, Ref) else None)
            self.bind(ln.results, result)
            for b in ln.binds:
                self.env[b.name] = self.bound_value(b)
            for name, size, stride in ln.expect:
                self.env[name] = g.create_node("call_function", ensure_layout,
                                               (self.node(name), self.arg(size), self.arg(stride)), name=name)
        elif isinstance(ln, Free):
            g.create_node("call_function", free, (self.node(ln.name),), name=f"free_{ln.name}")
            self._kill(ln.name)
        elif isinstance(ln, Return):
            g.output(tuple(self.arg(v) for v in ln.values))
        elif isinstance(ln, Track):
            values = [self.node(n) for n in ln.names] if ln.event == "place" else []
            g.create_node("call_function", track, (self.attr(TRACKER), ln.event, *ln.names, *values),
                          name=f"track_{ln.event}")
        else:
            raise TypeError(f"no FX emitter for {type(ln).__name__}")

    def bound_value(self, b: BindSymbol) -> torch.fx.Node:
        """The nodes reading what a BindSymbol binds (the last one named after the symbol)."""
        g, src = self.graph, self.node(b.source)
        last = b.divisor == 1
        name = b.name if last else None
        if b.attr == "value":
            read = src
        elif b.attr == "int":
            read = g.create_node("call_function", int, (src,), name=name)
        elif b.attr == "storage_offset":
            read = g.create_node("call_method", "storage_offset", (src,), name=name)
        else:
            read = g.create_node("call_method", b.attr, (src, b.dim), name=name)
        if last:
            return read
        return g.create_node("call_function", operator.floordiv, (read, b.divisor), name=b.name)

    def _kill(self, name: str) -> None:
        if self.env.pop(name, None) is not None:
            self.dead.add(name)


def emit_fx_graph(lines: Sequence[Line]) -> torch.fx.Graph:
    """The FX graph of a Wrapper IR program (nodes as in the module docstring's table).

    Kernels are `get_attr k_<name>` nodes and constants `get_attr <name>`: a root module must
    provide them to run it (`emit_fx`). Raises `TypeError` for a non-Line and `ValueError` when a
    line uses a name after its Free (or after its storage went to a Reuse).
    """
    em = _Emitter()
    for ln in lines:
        em.line(ln)
    em.graph.lint()
    return em.graph


def emit_fx(lines: Sequence[Line], kernels: Mapping[str, Callable[..., None]],
            constants: Mapping[str, torch.Tensor], *, tracker: object = None) -> torch.fx.GraphModule:
    """A runnable `GraphModule` of the program: `gm(*inputs)` returns what `call(list(inputs))`
    of `emit_python`'s module returns.

    Args:
        lines: the Wrapper IR (starting with Unpack, ending with Return).
        kernels: launcher by kernel name (coil.runtime.Kernel: `kernel(grid, *args)`); every
            kernel a KernelCall names must be present.
        constants: the graph's constant tensors by name (registered as buffers).
        tracker: what Track lines report to (the Python wrapper's `TRACKER` global); needed
            when `lines` hold Track lines.
    """
    graph = emit_fx_graph(lines)
    root = torch.nn.Module()
    for node in graph.nodes:
        if node.op != "get_attr":
            continue
        target = str(node.target)
        if target.startswith("k_") and target[2:] in kernels:
            setattr(root, target, kernels[target[2:]])
        elif target == TRACKER and tracker is not None:
            setattr(root, target, tracker)
        elif target in constants:
            root.register_buffer(target, constants[target])
        else:
            raise KeyError(f"the wrapper uses {target!r}, which is neither a kernel, a constant nor the tracker given")
    return torch.fx.GraphModule(root, graph, class_name="CoilWrapper")
