"""The Lowerer: state of one lowering, and the helpers lowerings use to build operations."""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import sympy
import torch
import torch.fx
from coil.lowering_ir import unbacked
from coil.lowering_ir.devices import elsewhere, graph_device, off_device
from coil.lowering_ir.errors import LoweringError, Unsupported
from coil.lowering_ir.layout import Expr, Layout, as_expr
from coil.lowering_ir.nodes import (
    ComputedBuffer,
    ConstantBuffer,
    ExternKernel,
    InputBuffer,
    LoweredGraph,
    ObjectInput,
    Operation,
    Pointwise,
    Reduction,
    ReinterpretView,
    SymbolBinding,
    SymbolInput,
    TensorRef,
)
from coil.lowering_ir.registry import lowering_for
from coil.lowering_ir.split_rule import SplitRule
from coil.lowering_ir.values import Value
from torch._library.fake_class_registry import FakeScriptObject


@dataclass(frozen=True)
class TensorMeta:
    """Shape, strides, dtype and device of an intermediate no FX node describes (a FakeTensor
    stand-in: buffers read only these)."""

    shape: tuple[Any, ...]
    strides: tuple[Any, ...]
    dtype: torch.dtype
    device: torch.device

    @staticmethod
    def contiguous(shape: Sequence[Any], dtype: torch.dtype, device: torch.device) -> TensorMeta:
        strides: list[Any] = []
        acc: Any = 1
        for s in reversed(list(shape)):
            strides.append(acc)
            acc = acc * s
        return TensorMeta(tuple(shape), tuple(reversed(strides)), dtype, device)

    def stride(self) -> tuple[Any, ...]:
        return self.strides

    def storage_offset(self) -> int:
        return 0

    def dim(self) -> int:
        return len(self.shape)


def _complex(node: torch.fx.Node) -> bool:
    """Does the node produce or read a complex tensor?"""
    vals = [node.meta.get("val")] + [a.meta.get("val") for a in node.all_input_nodes]
    flat: list[Any] = []
    for v in vals:
        flat.extend(v if isinstance(v, list | tuple) else [v])
    return any(isinstance(v, torch.Tensor) and v.dtype.is_complex for v in flat)


def index_symbols(prefix: str, n: int) -> list[sympy.Symbol]:
    """Loop variables `prefix0 .. prefix{n-1}` (non-negative integers)."""
    return [sympy.Symbol(f"{prefix}{i}", integer=True, nonnegative=True) for i in range(n)]


class Lowerer:
    """State of one lowering: the operations made so far and the value of each FX node, and the
    split-reduction rule's machine facts (`split_rule`; None: `SplitRule()`)."""

    def __init__(self, gm: torch.fx.GraphModule, name: str, split_rule: SplitRule | None = None) -> None:
        self.gm = gm
        self.name = name
        self.split_rule = split_rule if split_rule is not None else SplitRule()
        self.operations: list[Operation] = []
        self.views: list[ReinterpretView] = []
        self.constants: list[ConstantBuffer] = []
        self.inputs: list[InputBuffer | SymbolInput | ObjectInput | None] = []
        self.env: dict[torch.fx.Node, Any] = {}
        self.fake_offset: dict[str, Expr] = {}  # storage buffer -> storage offset of its FakeTensor
        self._count = 0
        self._seeds: dict[str, ComputedBuffer] = {}
        self._streams = 0
        self.current: torch.fx.Node | None = None
        self.device = graph_device(gm)  # where its kernels run (coil.lowering_ir.devices)

    # -- names and buffers ------------------------------------------------------------------
    def fresh(self, prefix: str) -> str:
        self._count += 1
        return f"{prefix}{self._count}"

    def origins(self) -> tuple[str, ...]:
        return (self.current.name,) if self.current is not None else ()

    def new_buffer(self, val: Any) -> ComputedBuffer:
        """A buffer laid out exactly as the FakeTensor `val` (offset folded into its pointer)."""
        offset = as_expr(val.storage_offset())  # never int(): a symbolic offset would be specialised
        buf = ComputedBuffer(self.fresh("buf"), Layout.from_tensor(val, offset))
        self.fake_offset[buf.name] = offset
        return buf

    def out_val(self) -> Any:
        assert self.current is not None
        return self.current.meta["val"]

    # -- building operations -----------------------------------------------------------------
    def pointwise(self, fn: Callable[[list[sympy.Symbol]], Value], val: Any = None) -> ComputedBuffer:
        """A Pointwise node over the output of the current FX node; fn(p_vars) -> Value."""
        val = self.out_val() if val is None else val
        assert isinstance(val, torch.Tensor | TensorMeta)
        out = self.new_buffer(val)
        p = index_symbols("p", val.dim())
        body = fn(p)
        op = Pointwise(self.fresh("op"), self.origins(), out, out.layout.size, body, out.layout.index(p))
        self.operations.append(op)
        return out

    def reduction(
        self,
        val: Any,
        reduction_ranges: Sequence[Expr],
        reduction_type: str,
        fn: Callable[[list[sympy.Symbol], list[sympy.Symbol]], Value],
        acc_dtype: torch.dtype,
    ) -> ComputedBuffer:
        """A Reduction writing a buffer shaped like `val`; fn(p_vars, r_vars) -> Value."""
        out = self.new_buffer(val)
        p = index_symbols("p", val.dim())
        r = index_symbols("r", len(reduction_ranges))
        body = fn(p, r)
        op = Reduction(
            self.fresh("op"), self.origins(), out, out.layout.size, tuple(reduction_ranges),
            reduction_type, body, out.layout.index(p), acc_dtype,
        )
        self.operations.append(op)
        return out

    def random_seed(self, device: torch.device) -> tuple[ComputedBuffer, int]:
        """The graph's seed buffer on `device` (drawn from torch's RNG once per call, so
        torch.manual_seed reproduces results) and a fresh stream number for one random op."""
        key = str(device)
        if key not in self._seeds:
            layout = Layout(device, torch.int64, (sympy.Integer(1),), (sympy.Integer(1),))
            buf = ComputedBuffer(self.fresh("seed"), layout)
            self.fake_offset[buf.name] = sympy.Integer(0)
            args = (0, 2**31 - 1, [1])
            op = ExternKernel(self.fresh("op"), self.origins(), torch.ops.aten.randint.low, args,
                              {"dtype": torch.int64, "device": device}, buf, False)
            self.operations.append(op)
            self._seeds[key] = buf
        self._streams += 1
        return self._seeds[key], self._streams

    def view(self, ref: TensorRef, val: torch.Tensor) -> ReinterpretView:
        """`ref` seen through the layout of FakeTensor `val` (which shares ref's storage)."""
        base = ref.storage
        layout = Layout.from_tensor(val, self.fake_offset.get(base.name, 0))
        v = ReinterpretView(self.fresh("view"), base, layout)
        self.views.append(v)
        return v

    def extern(self, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any], *, fallback: bool,
               mutates: tuple[str, ...] = ()) -> Any:
        """An ExternKernel calling `target`; its results are shaped by the node's meta["val"].

        When the node defines unbacked symbols (data-dependent sizes: `meta["unbacked_bindings"]`)
        the call binds them from its results (`unbacked.bind_results`); a node returning a
        scalar (`_local_scalar_dense`) then has that scalar, a sympy Symbol, as its result, and
        its value in the graph is the node's size expression."""

        def make(val: Any) -> Any:
            if isinstance(val, torch.Tensor):
                return self.new_buffer(val)
            if isinstance(val, list | tuple):
                return type(val)(make(v) for v in val)
            return None

        assert self.current is not None
        val = self.current.meta.get("val")
        # ops returning None (aten._assert_async.msg) have no meta["val"]: no result buffers
        results = make(val) if not mutates else None
        bound = unbacked.bindings_of(self.current)
        bindings: tuple[SymbolBinding, ...] = ()
        value = results
        if isinstance(val, torch.SymInt | torch.SymFloat | torch.SymBool):
            value = unbacked.sym_expr(val)
        if bound or value is not results:
            results, bindings = unbacked.bind_results(self.current.name, val, results, bound, self.fresh)
        op = ExternKernel(self.fresh("op"), self.origins(), target, args, kwargs, results, fallback, mutates,
                          bindings)
        self.operations.append(op)
        return value

    # -- the walk --------------------------------------------------------------------------
    def run(self) -> LoweredGraph:
        outputs: list[Any] = []
        for node in self.gm.graph.nodes:
            self.current = node
            if node.op == "placeholder":
                self.env[node] = self._placeholder(node)
            elif node.op == "get_attr":
                self.env[node] = self._get_attr(node)
            elif node.op == "call_function":
                self.env[node] = self._call(node)
            elif node.op == "output":
                if not isinstance(node.args[0], list | tuple):
                    raise LoweringError(node.name, "output", "the graph must return a tuple or list "
                                        "(as AOTAutograd graphs do), not a bare value")
                outputs = list(torch.fx.node.map_arg(node.args[0], lambda n: self.env[n]))
            else:
                raise LoweringError(node.name, str(node.target), f"unsupported FX node kind {node.op}")
        self.current = None
        return LoweredGraph(self.name, self.inputs, self.constants, self.operations, outputs, self.views,
                            self._hints())

    def _hints(self) -> dict[sympy.Symbol, int]:
        """Example values of the graph's size symbols (from the FakeTensors' ShapeEnv); the
        unbacked ones (data-dependent: no example value) get `unbacked.fallback_hint`."""
        for node in self.gm.graph.nodes:
            val = node.meta.get("val")
            mode = getattr(val, "fake_mode", None)
            env = getattr(mode, "shape_env", None)
            if env is not None:
                known = getattr(env, "backed_var_to_val", None)
                if known is None:
                    known = env.var_to_val
                hints = {k: int(v) for k, v in known.items() if isinstance(k, sympy.Symbol)}
                return {**unbacked.fallback_hints(env, set(hints)), **hints}
        return {}

    def _placeholder(self, node: torch.fx.Node) -> Any:
        val = node.meta.get("val")
        index = len(self.inputs)
        if isinstance(val, torch.Tensor):
            offset = as_expr(val.storage_offset())
            buf = InputBuffer(f"arg{index}", Layout.from_tensor(val, offset), index)
            self.fake_offset[buf.name] = offset
            self.inputs.append(buf)
            return buf
        if isinstance(val, torch.SymInt):
            expr = as_expr(val)
            if isinstance(expr, sympy.Symbol):
                self.inputs.append(SymbolInput(index, expr))
                return expr
        if isinstance(val, FakeScriptObject | torch.ScriptObject):
            obj = ObjectInput(index, f"obj{index}")
            self.inputs.append(obj)
            return obj
        self.inputs.append(None)
        return val

    def _get_attr(self, node: torch.fx.Node) -> Any:
        value = getattr(self.gm, str(node.target))
        if not isinstance(value, torch.Tensor):
            return value
        buf = ConstantBuffer(f"const{len(self.constants)}", Layout.from_tensor(value, int(value.storage_offset())), value)
        self.fake_offset[buf.name] = sympy.Integer(int(value.storage_offset()))
        self.constants.append(buf)
        return buf

    def _call(self, node: torch.fx.Node) -> Any:
        args: Any = torch.fx.node.map_arg(node.args, lambda n: self.env[n])
        kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: self.env[n])
        if node.target is operator.getitem:
            return args[0][args[1]]
        val = node.meta.get("val")
        scalar = isinstance(val, torch.SymInt | torch.SymFloat | torch.SymBool) and unbacked.reads_scalar(node.target)
        if isinstance(node.target, torch._ops.OpOverload) and (scalar or unbacked.bindings_of(node)):
            # a data-dependent size (nonzero's count, .item()): the call runs through ATen and
            # the wrapper binds the new symbols from its results (a native lowering could not)
            return self.extern(node.target, tuple(args), dict(kwargs), fallback=not scalar)
        if isinstance(val, torch.SymInt | torch.SymFloat | torch.SymBool) or (
                isinstance(val, int | float | bool) and not isinstance(node.target, torch._ops.OpOverload)):
            # size arithmetic (operator.mul on SymInts, sym_size, comparisons, ...): the ShapeEnv
            # already knows it, as a sympy expression (a relation for a SymBool)
            if isinstance(val, torch.SymInt | torch.SymFloat | torch.SymBool):
                return unbacked.sym_expr(val)
            if isinstance(val, int) and not isinstance(val, bool):
                return as_expr(val)
            return val
        fn = lowering_for(node.target)
        if fn is not None and _complex(node):
            fn = None  # Triton has no complex types: such ops run through ATen
        if fn is not None:
            made = len(self.operations)
            try:
                out = fn(self, node, *args, **kwargs)
                if not elsewhere(self.operations[made:], self.device):
                    return out
                # kernels run on the graph's device only: a node on another device (a CPU tensor
                # in a CUDA graph) is an ATen call where its tensors are (coil.lowering_ir.devices)
                del self.operations[made:]
            except Unsupported:
                pass
            except LoweringError:
                raise
            except Exception as e:
                raise LoweringError(node.name, str(node.target), f"{type(e).__name__}: {e}") from e
        if not isinstance(node.target, torch._ops.OpOverload | torch._ops.HigherOrderOperator):
            raise LoweringError(node.name, str(node.target), "not an ATen op; cannot fall back")
        # work on another device than the graph's is an ATen call by design, not a fallback
        return self.extern(node.target, tuple(args), dict(kwargs), fallback=not off_device(node, self.device))
