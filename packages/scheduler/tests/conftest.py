"""Helpers for the scheduler tests: tracing + lowering, and brute-force checks of loop mappings.

The brute-force checks enumerate iteration spaces point by point (tiny shapes) and compare what
an operation reads and writes at each point, before and after canonicalisation / grouping. They
do not reuse the scheduler's symbolic reasoning, so they are an independent oracle for it.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import coil.lowering_ir as L
import pytest
import sympy
import torch
from coil.scheduler import ComboGroup, KernelGroup, LoopNest, Schedule, schedule
from torch.fx.experimental.proxy_tensor import make_fx


def _syms(prefix: str, n: int) -> list[sympy.Symbol]:
    return [sympy.Symbol(f"{prefix}{i}", integer=True, nonnegative=True) for i in range(n)]


def _grid(sizes: Sequence[Any]) -> Any:
    return itertools.product(*[range(int(s)) for s in sizes])


def _at(e: sympy.Expr, env: dict[sympy.Symbol, int]) -> int:
    return int(e.xreplace({k: sympy.Integer(v) for k, v in env.items()}))


def _accesses(body: L.Value) -> list[tuple[str, sympy.Expr]]:
    """(buffer, index) of every load of a body, in first-visit order."""
    return [(ld.buffer, ld.index) for ld in L.loads(body)]


def op_trace(op: L.Pointwise | L.Reduction) -> list[tuple[int, tuple[tuple[str, int], ...]]]:
    """(store index, reads) for each point of the op, in row-major order of its own loops."""
    p = _syms("p", len(op.ranges))
    acc = _accesses(op.body)
    rows = []
    if isinstance(op, L.Pointwise):
        for pt in _grid(op.ranges):
            env = dict(zip(p, pt, strict=True))
            rows.append((_at(op.store_index, env), tuple((b, _at(e, env)) for b, e in acc)))
        return rows
    r = _syms("r", len(op.reduction_ranges))
    for pt in _grid(op.ranges):
        for rt in _grid(op.reduction_ranges):
            env = dict(zip(p, pt, strict=True))
            env.update(zip(r, rt, strict=True))
            rows.append((_at(op.store_index, env), tuple((b, _at(e, env)) for b, e in acc)))
    return rows


def nest_trace(nest: LoopNest) -> list[tuple[int, tuple[tuple[str, int], ...]]]:
    acc = _accesses(nest.body)
    rows = []
    for pt in _grid(nest.x_sizes):
        for rt in _grid(nest.r_sizes):
            env = dict(zip(nest.x_syms, pt, strict=True))
            env.update(zip(nest.r_syms, rt, strict=True))
            rows.append((_at(nest.store_index, env), tuple((b, _at(e, env)) for b, e in acc)))
    return rows


def group_member_trace(group: KernelGroup, m: Any) -> list[tuple[int, tuple[tuple[str, int], ...]]]:
    """What member m stores/reads at each point of the group's (x, r) space, through its mapping."""
    xs = _syms("x", len(group.x_dims))
    rs = _syms("rd", len(group.r_dims))
    acc = _accesses(m.nest.body)
    rows = []
    r_dims = group.r_dims if m.kind != "x" else []
    for xt in _grid(group.x_dims):
        for rt in _grid(r_dims):
            env = dict(zip(xs, xt, strict=True))
            env.update(zip(rs[: len(rt)], rt, strict=True))
            row = (_at(m.kernel_expr(m.nest.store_index), env),
                   tuple((b, _at(m.kernel_expr(e), env)) for b, e in acc))
            rows.append(row)
    return rows


class Sched:
    """Tracing, lowering and checking helpers (a fixture: conftest is not importable)."""

    @staticmethod
    def lower(fn: Callable[..., Any], *inputs: Any) -> L.LoweredGraph:
        gm = make_fx(fn, decomposition_table=L.decomposition_table(), tracing_mode="fake")(*inputs)
        return L.lower(gm)

    @staticmethod
    def schedule(fn: Callable[..., Any], *inputs: Any, fusion: bool = True) -> Schedule:
        return schedule(Sched.lower(fn, *inputs), fusion=fusion)

    op_trace = staticmethod(op_trace)
    nest_trace = staticmethod(nest_trace)
    group_member_trace = staticmethod(group_member_trace)

    @staticmethod
    def check_topological(s: Schedule) -> None:
        """Every buffer a step reads is an input/constant or written by an earlier step."""
        g = s.graph
        known = {b.name for b in g.inputs if isinstance(b, L.InputBuffer)} | {c.name for c in g.constants}
        for st in s.steps:
            if isinstance(st, KernelGroup):
                written = [m.op.output.name for m in st.members]
                inside: set[str] = set()
                for m in st.members:
                    for r in m.op.reads():
                        assert r in known or r in inside, f"{st.name}: {m.op.name} reads {r} too early"
                    inside.add(m.op.output.name)
                known |= set(written)
            else:
                for r in st.reads():
                    assert r in known, f"{st.name} reads {r} too early"
                known |= {b.name for b in st.outputs}
        ops = [m.op for st in s.kernels() for m in st.members] + s.externs()
        assert sorted(id(o) for o in ops) == sorted(id(o) for o in g.operations)

    @staticmethod
    def check_groups(s: Schedule) -> None:
        """Each member of each group does, through its mapping, exactly what its op does; values
        read from inside the group are read at the very point where they were written; stores are
        exactly the buffers needed outside."""
        from coil.scheduler import output_buffers

        readers: dict[str, set[int]] = {}
        for op in s.graph.operations:
            for r in op.reads():
                readers.setdefault(r, set()).add(id(op))
        outs = output_buffers(s.graph.outputs)
        # a combo's parts are kernels of their own spaces (coil.scheduler.combo)
        for st in [p for k in s.kernels() for p in (k.parts if isinstance(k, ComboGroup) else [k])]:
            members = {id(m.op) for m in st.members}
            for m in st.members:
                want = op_trace(m.op)
                got = group_member_trace(st, m)
                if m.kind == "reduce":
                    # per output element, the same multiset of reads
                    def per_out(rows: list[Any]) -> dict[int, Counter[Any]]:
                        d: dict[int, Counter[Any]] = {}
                        for store, reads in rows:
                            d.setdefault(store, Counter())[reads] += 1
                        return d

                    assert per_out(got) == per_out(want), (st.name, m.op.name)
                else:
                    assert Counter(got) == Counter(want), (st.name, m.op.name)
            # internal values: read at the kernel point where they are written
            xs = _syms("x", len(st.x_dims))
            rs = _syms("rd", len(st.r_dims))
            writer = {m.op.output.name: m for m in st.members}
            for m in st.members:
                for ld in L.loads(m.nest.body):
                    w = writer.get(ld.buffer)
                    if w is None:
                        continue
                    use_r = w.kind == "r"
                    for xt in _grid(st.x_dims):
                        for rt in _grid(st.r_dims if use_r else []):
                            env = dict(zip(xs, xt, strict=True))
                            env.update(zip(rs[: len(rt)], rt, strict=True))
                            assert _at(m.kernel_expr(ld.index), env) == _at(w.kernel_expr(w.nest.store_index), env)
            for b in st.stores + st.internal:
                needed = b in outs or bool(readers.get(b, set()) - members)
                assert (b in st.stores) == needed, (st.name, b)
            assert sorted(st.stores + st.internal) == sorted(m.op.output.name for m in st.members)


@pytest.fixture
def no_combos(monkeypatch: pytest.MonkeyPatch) -> None:
    """No combo kernels (fusion.COMBO_MAX_PARTS = 1): for tests of which ops share a kernel
    through one iteration space, whose independent groups a combo would otherwise gather."""
    from coil.scheduler import fusion

    monkeypatch.setattr(fusion, "COMBO_MAX_PARTS", 1)


@pytest.fixture(scope="session")
def sch() -> type[Sched]:
    return Sched


@pytest.fixture
def x24() -> torch.Tensor:
    return torch.randn(2, 3, 4)
