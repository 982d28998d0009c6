"""Helpers for the wrapper-codegen tests.

coil.triton_codegen is not a dependency of this package, so kernel groups run through
`FakeKernel`: a Python callable with the launcher signature `kernel(grid, *args)` that computes
what the group's operations mean (nodes.py semantics), point by point with eager scalar ops, on
the tensors the wrapper hands it. Tiny shapes only.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import coil.lowering_ir as L
import pytest
import sympy
import torch
from coil.scheduler import KernelGroup, Schedule, schedule
from coil.wrapper_codegen import KernelLaunch, WrapperProgram, build, emit_python
from torch.fx.experimental.proxy_tensor import make_fx

_SPECIAL: dict[str, Callable[..., torch.Tensor]] = {
    "truediv": torch.true_divide,
    "div_rn": torch.true_divide,
    "floordiv": lambda a, b: torch.div(a, b, rounding_mode="floor"),
    "truncdiv": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    "lshift": torch.bitwise_left_shift,
    "rshift": torch.bitwise_right_shift,
}


def _value(v: L.Value, env: dict[sympy.Symbol, sympy.Integer], flats: dict[str, torch.Tensor]) -> torch.Tensor:
    if isinstance(v, L.Constant):
        return torch.tensor(v.value, dtype=v.dtype)
    if isinstance(v, L.IndexValue):
        return torch.tensor(int(v.index.xreplace(env)), dtype=v.dtype)
    if isinstance(v, L.Load):
        return flats[v.buffer][int(v.index.xreplace(env))].clone()
    assert isinstance(v, L.Op)
    args = [_value(a, env, flats) for a in v.args]
    if v.name == "cast":
        return args[0].to(v.dtype)
    fn = _SPECIAL.get(v.name) or getattr(torch, v.name)
    return fn(*args).to(v.dtype)


def _run_op(op: L.Pointwise | L.Reduction, flats: dict[str, torch.Tensor]) -> None:
    out = flats[op.output.name]
    p = [sympy.Symbol(f"p{i}", integer=True, nonnegative=True) for i in range(len(op.ranges))]
    for pt in itertools.product(*[range(int(s)) for s in op.ranges]):
        env = {s: sympy.Integer(i) for s, i in zip(p, pt, strict=True)}
        if isinstance(op, L.Pointwise):
            out[int(op.store_index.xreplace(env))] = _value(op.body, env, flats).to(out.dtype)
            continue
        r = [sympy.Symbol(f"r{i}", integer=True, nonnegative=True) for i in range(len(op.reduction_ranges))]
        rtype = op.reduction_type
        vals, dsts = [], []
        for rt in itertools.product(*[range(int(s)) for s in op.reduction_ranges]):
            renv = dict(env)
            renv.update({s: sympy.Integer(i) for s, i in zip(r, rt, strict=True)})
            vals.append(_value(op.body, renv, flats).to(op.acc_dtype))
            dsts.append(int(op.store_index.xreplace(renv)))
        t = torch.stack(vals) if vals else torch.empty(0, dtype=op.acc_dtype)
        if rtype in ("cumsum", "cumprod"):  # inclusive scan: a value at every position
            scanned = torch.cumsum(t, 0) if rtype == "cumsum" else torch.cumprod(t, 0)
            for d, v in zip(dsts, scanned, strict=True):
                out[d] = v.to(out.dtype)
            continue
        red = {
            "sum": lambda t: t.sum(dtype=op.acc_dtype), "prod": lambda t: t.prod(dtype=op.acc_dtype),
            "max": lambda t: t.max(), "min": lambda t: t.min(), "any": lambda t: t.any(), "all": lambda t: t.all(),
            "argmax": lambda t: t.argmax(), "argmin": lambda t: t.argmin(),
        }[rtype]
        out[dsts[0]] = red(t).to(out.dtype)


class FakeKernel:
    """Runs a kernel group's operations on the buffers the wrapper passes (launcher signature)."""

    def __init__(self, group: KernelGroup, launch: KernelLaunch, buffers: dict[str, L.Buffer]) -> None:
        self.group = group
        self.launch = launch
        self.buffers = buffers
        self.calls = 0

    def __call__(self, grid: tuple[int, ...], *args: Any) -> None:
        self.calls += 1
        n = len(self.launch.pointer_args)
        tensors, sizes = args[:n], args[n:]
        assert tuple(sizes) == tuple(int(s) for s in self.launch.size_args)
        assert tuple(grid) == (int(self.launch.grid), 1, 1)
        flats: dict[str, torch.Tensor] = {}
        for name, t in zip(self.launch.pointer_args, tensors, strict=True):
            buf = self.buffers[name]
            assert isinstance(t, torch.Tensor) and t.dtype == buf.layout.dtype, name
            extent = int(buf.layout.storage_extent())
            assert t.untyped_storage().nbytes() >= (t.storage_offset() + extent) * t.element_size()
            flats[name] = torch.as_strided(t, (extent,), (1,), t.storage_offset())
        for name in self.group.internal:
            buf = self.buffers[name]
            flats[name] = torch.zeros(int(buf.layout.storage_extent()), dtype=buf.layout.dtype)
        for m in self.group.members:
            _run_op(m.op, flats)


def launches_for(s: Schedule) -> dict[str, KernelLaunch]:
    out = {}
    for k in s.kernels():
        reads = [r for m in k.members for r in m.op.reads() if r not in k.internal]
        ptrs = tuple(dict.fromkeys([*reads, *k.stores]))
        size_args = (k.xnumel, k.rnumel) if k.is_reduction else (k.xnumel,)
        out[k.name] = KernelLaunch(k.name, ptrs, size_args, sympy.ceiling(k.xnumel / 4))
    return out


class W:
    """Build, emit and run wrapper programs (a fixture: conftest is not importable)."""

    launches_for = staticmethod(launches_for)
    FakeKernel = FakeKernel

    @staticmethod
    def schedule(fn: Callable[..., Any], *inputs: Any, fusion: bool = True) -> Schedule:
        gm = make_fx(fn, decomposition_table=L.decomposition_table(), tracing_mode="fake")(*inputs)
        return schedule(L.lower(gm), fusion=fusion)

    @staticmethod
    def program(s: Schedule, reuse: bool = True, arena: bool = False) -> WrapperProgram:
        return build(s, launches_for(s), reuse=reuse, arena=arena)

    @staticmethod
    def compile(s: Schedule, reuse: bool = True, check_inputs: bool = False, arena: bool = False
                ) -> tuple[Callable[[list[Any]], Any], str, WrapperProgram, dict[str, FakeKernel]]:
        launches = launches_for(s)
        prog = build(s, launches, reuse=reuse, check_inputs=check_inputs, arena=arena)
        src = emit_python(prog.lines, list(launches), sorted(prog.constants), s.graph.name)
        bufs = s.graph.buffers()
        kernels = {k.name: FakeKernel(k, launches[k.name], bufs) for k in s.kernels()}
        ns: dict[str, Any] = {}
        exec(compile(src, "<wrapper>", "exec"), ns)
        call = ns["make"](torch.device("cpu"), prog.constants, kernels)
        return call, src, prog, kernels

    @staticmethod
    def check(fn: Callable[..., Any], *inputs: Any, reuse: bool = True, fusion: bool = True,
              rtol: float = 1e-5, atol: float = 1e-5, arena: bool = False) -> tuple[str, WrapperProgram]:
        want = fn(*inputs)
        s = W.schedule(fn, *inputs, fusion=fusion)
        call, src, prog, kernels = W.compile(s, reuse, arena=arena)
        args = list(inputs)
        got = call(args)
        assert args == []  # the boxed inputs are taken over
        assert isinstance(got, tuple) and len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            if isinstance(w, torch.Tensor):
                assert g.dtype == w.dtype and g.shape == w.shape and g.stride() == w.stride()
                torch.testing.assert_close(g, w, rtol=rtol, atol=atol, equal_nan=True)
            else:
                assert g == w
        assert all(k.calls == 1 for k in kernels.values())
        return src, prog


@pytest.fixture(scope="session")
def wr() -> type[W]:
    return W


def referenced(x: Any) -> list[str]:
    from coil.wrapper_codegen import Ref

    if isinstance(x, Ref):
        return [x.name]
    if isinstance(x, list | tuple):
        return [n for y in x for n in referenced(y)]
    if isinstance(x, dict):
        return [n for y in x.values() for n in referenced(y)]
    return []


@pytest.fixture(scope="session")
def refs() -> Callable[[Any], list[str]]:
    return referenced
