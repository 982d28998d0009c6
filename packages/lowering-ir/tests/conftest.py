"""Helpers for the lowering-ir tests: tracing, and a brute-force reference evaluator of the IR.

The evaluator runs a LoweredGraph point by point with eager PyTorch scalar ops, straight from the
IR's documented semantics (nodes.py / values.py): it is the independent oracle that lets the tests
compare what a lowering *computes* with eager PyTorch, without any code generator.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import coil.lowering_ir as L
import pytest
import sympy
import torch
from torch.fx.experimental.proxy_tensor import make_fx

warnings.filterwarnings("ignore", message=".*TypedStorage.*")

_SPECIAL: dict[str, Callable[..., torch.Tensor]] = {
    "truediv": torch.true_divide,
    "div_rn": torch.true_divide,
    "floordiv": lambda a, b: torch.div(a, b, rounding_mode="floor"),
    "truncdiv": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    "lshift": torch.bitwise_left_shift,
    "rshift": torch.bitwise_right_shift,
}


def _op_fn(name: str) -> Callable[..., torch.Tensor]:
    return _SPECIAL.get(name) or getattr(torch, name)


def _init(rtype: str, dtype: torch.dtype) -> torch.Tensor:
    if rtype == "sum":
        return torch.zeros((), dtype=dtype)
    if rtype == "prod":
        return torch.ones((), dtype=dtype)
    if rtype == "any":
        return torch.zeros((), dtype=torch.bool)
    if rtype == "all":
        return torch.ones((), dtype=torch.bool)
    lo = rtype == "max"
    if dtype.is_floating_point:
        return torch.tensor(float("-inf") if lo else float("inf"), dtype=dtype)
    info = torch.iinfo(dtype)
    return torch.tensor(info.min if lo else info.max, dtype=dtype)


def _combine(rtype: str, acc: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    if rtype == "sum":
        return acc + v.to(acc.dtype)
    if rtype == "prod":
        return acc * v.to(acc.dtype)
    if rtype == "max":
        return torch.maximum(acc, v.to(acc.dtype))
    if rtype == "min":
        return torch.minimum(acc, v.to(acc.dtype))
    if rtype == "any":
        return acc | (v != 0)
    return acc & (v != 0)


def _uses_r(op: Any) -> bool:
    return any(sym.name.startswith("r") for sym in op.store_index.free_symbols)


class Evaluator:
    """Runs a LoweredGraph element by element (tiny shapes only)."""

    def __init__(self, graph: L.LoweredGraph) -> None:
        self.graph = graph
        self.storage: dict[str, torch.Tensor] = {}

    # -- storage -------------------------------------------------------------------------
    def _flat(self, t: torch.Tensor, extent: int) -> torch.Tensor:
        return torch.as_strided(t, (extent,), (1,), t.storage_offset())

    def _fresh(self, buf: L.Buffer) -> torch.Tensor:
        n = int(buf.layout.storage_extent())
        dt = buf.layout.dtype
        if dt.is_floating_point:
            return torch.full((n,), float("nan"), dtype=dt)
        return torch.zeros((n,), dtype=dt)

    def view(self, ref: Any) -> torch.Tensor:
        flat = self.storage[ref.storage.name]
        lay = ref.layout
        return torch.as_strided(flat, [int(s) for s in lay.size], [int(s) for s in lay.stride],
                                flat.storage_offset() + int(lay.offset))

    # -- values --------------------------------------------------------------------------
    def value(self, v: L.Value, env: dict[sympy.Symbol, sympy.Integer], memo: dict[int, torch.Tensor]) -> torch.Tensor:
        got = memo.get(id(v))
        if got is not None:
            return got
        if isinstance(v, L.Constant):
            out = torch.tensor(v.value, dtype=v.dtype)
        elif isinstance(v, L.IndexValue):
            out = torch.tensor(int(v.index.xreplace(env)), dtype=v.dtype)
        elif isinstance(v, L.Load):
            flat = self.storage[v.buffer]
            assert flat.dtype == v.dtype, (v, flat.dtype)
            if v.mask is not None and not bool(self.value(v.mask, env, memo)):
                out = torch.zeros((), dtype=v.dtype)  # masked off: nothing is read, the value is 0
            else:
                bound = dict(env)
                bound.update({s: sympy.Integer(int(self.value(val, env, memo))) for s, val in v.indirect})
                i = int(v.index.xreplace(bound))
                assert 0 <= i < flat.numel(), f"load {v.buffer}[{i}] out of bounds {flat.numel()}"
                out = flat[i].clone()
        else:
            assert isinstance(v, L.Op)
            args = [self.value(a, env, memo) for a in v.args]
            out = args[0].to(v.dtype) if v.name == "cast" else _op_fn(v.name)(*args).to(v.dtype)
        assert out.dtype == v.dtype, (v, out.dtype)
        memo[id(v)] = out
        return out

    def _points(self, ranges: Sequence[Any], prefix: str) -> tuple[list[sympy.Symbol], Any]:
        syms = [sympy.Symbol(f"{prefix}{i}", integer=True, nonnegative=True) for i in range(len(ranges))]
        return syms, itertools.product(*[range(int(r)) for r in ranges])

    def run_op(self, op: L.Operation) -> None:
        if isinstance(op, L.ExternKernel):
            self._extern(op)
            return
        if isinstance(op, L.Scatter):
            self._scatter(op)
            return
        out = self.storage.setdefault(op.output.name, self._fresh(op.output))
        psyms, points = self._points(op.ranges, "p")
        for pt in points:
            env = {s: sympy.Integer(i) for s, i in zip(psyms, pt, strict=True)}
            dst = None if _uses_r(op) else int(op.store_index.xreplace(env))
            if isinstance(op, L.Pointwise):
                out[dst] = self.value(op.body, env, {}).to(out.dtype)
                continue
            rtype = op.reduction_type
            scan = rtype in ("cumsum", "cumprod")
            arg = rtype in ("argmax", "argmin")
            acc = _init({"cumsum": "sum", "cumprod": "prod"}.get(rtype, rtype), op.acc_dtype) if not arg else None
            best, best_i = None, 0
            rsyms, rpoints = self._points(op.reduction_ranges, "r")
            for k, rp in enumerate(rpoints):
                renv = dict(env)
                renv.update({s: sympy.Integer(i) for s, i in zip(rsyms, rp, strict=True)})
                v = self.value(op.body, renv, {})
                if arg:  # first occurrence wins; NaN counts as the extreme (torch semantics)
                    better = best is None or (bool(v.isnan()) and not bool(best.isnan())) or (
                        not bool(best.isnan()) and bool(v > best if rtype == "argmax" else v < best))
                    if better:
                        best, best_i = v, k
                    continue
                acc = _combine({"cumsum": "sum", "cumprod": "prod"}.get(rtype, rtype), acc, v)
                if scan:  # an inclusive scan stores its running value at every position
                    out[int(op.store_index.xreplace(renv))] = acc.to(out.dtype)
            if arg:
                out[dst] = torch.tensor(best_i).to(out.dtype)
            elif not scan:
                out[dst] = acc.to(out.dtype)

    def _scatter(self, op: L.Scatter) -> None:
        """A copy of `base` (zeros without one), then, point by point in order, the target
        element (its mask, then its indirect bindings) gets the value, or adds it."""
        out = self.storage.setdefault(op.output.name, self._fresh(op.output))
        logical = self.view(op.output)
        if op.base is None:
            logical.zero_()
        else:
            logical.copy_(self.view(op.base))
        psyms, points = self._points(op.ranges, "p")
        for pt in points:
            env = {s: sympy.Integer(i) for s, i in zip(psyms, pt, strict=True)}
            memo: dict[int, torch.Tensor] = {}
            target = op.target
            if target.mask is not None and not bool(self.value(target.mask, env, memo)):
                continue
            bound = dict(env)
            bound.update({s: sympy.Integer(int(self.value(val, env, memo))) for s, val in target.indirect})
            i = int(target.index.xreplace(bound))
            assert 0 <= i < out.numel(), f"scatter {op.output.name}[{i}] out of bounds {out.numel()}"
            v = self.value(op.value, env, memo).to(out.dtype)
            out[i] = out[i] + v if op.accumulate else v

    def _extern(self, op: L.ExternKernel) -> None:
        def conv(x: Any) -> Any:
            if isinstance(x, L.Buffer | L.ReinterpretView):
                return self.view(x)
            if isinstance(x, list):
                return [conv(y) for y in x]
            if isinstance(x, tuple):
                return tuple(conv(y) for y in x)
            if isinstance(x, dict):
                return {k: conv(y) for k, y in x.items()}
            return x

        res = op.kernel(*conv(op.args), **conv(op.kwargs))

        def put(ref: Any, val: Any) -> None:
            if isinstance(ref, L.Buffer):
                self.storage[ref.name] = self._fresh(ref)
                self.view(ref).copy_(val)
            elif isinstance(ref, list | tuple):
                for r, v in zip(ref, val, strict=True):
                    put(r, v)

        if op.results is not None:
            put(op.results, res)

    def run(self, inputs: Sequence[Any]) -> list[Any]:
        g = self.graph
        for b in g.inputs:
            if isinstance(b, L.InputBuffer):
                t = inputs[b.index]
                self.storage[b.name] = self._flat(t, int(b.layout.storage_extent()))
        for c in g.constants:
            assert c.value is not None
            self.storage[c.name] = self._flat(c.value, int(c.layout.storage_extent()))
        for op in g.operations:
            self.run_op(op)

        def out(o: Any) -> Any:
            if isinstance(o, L.Buffer | L.ReinterpretView):
                return self.view(o).clone()
            if isinstance(o, list | tuple):
                return type(o)(out(x) for x in o)
            return o

        return [out(o) for o in g.outputs]


class IR:
    """Tracing and evaluation helpers (a fixture: conftest is not importable in importlib mode)."""

    @staticmethod
    def trace(fn: Callable[..., Any], *inputs: Any, decompose: bool = True) -> torch.fx.GraphModule:
        table = L.decomposition_table() if decompose else None
        return make_fx(fn, decomposition_table=table, tracing_mode="fake")(*inputs)

    @staticmethod
    def lower(fn: Callable[..., Any], *inputs: Any, decompose: bool = True) -> L.LoweredGraph:
        return L.lower(IR.trace(fn, *inputs, decompose=decompose))

    @staticmethod
    def evaluate(graph: L.LoweredGraph, inputs: Sequence[Any]) -> list[Any]:
        return Evaluator(graph).run(inputs)

    @staticmethod
    def targets(gm: torch.fx.GraphModule) -> list[Any]:
        return [n.target for n in gm.graph.nodes if n.op == "call_function"]

    @staticmethod
    def assert_same(got: Sequence[Any], want: Sequence[Any], rtol: float = 1e-5, atol: float = 1e-6) -> None:
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            if isinstance(w, torch.Tensor):
                assert isinstance(g, torch.Tensor)
                assert g.dtype == w.dtype, (g.dtype, w.dtype)
                assert g.shape == w.shape, (g.shape, w.shape)
                torch.testing.assert_close(g, w, rtol=rtol, atol=atol, equal_nan=True)
            else:
                assert g == w


@pytest.fixture(scope="session")
def ir() -> type[IR]:
    return IR
