"""Triton source for one kernel group.

Layout of a generated kernel (reduction case):

    xindex = program_id(0) * XBLOCK + arange(XBLOCK)[:, None]; xmask; x dims by div/mod
    [x members that need no reduction]
    for each loop segment (looped) / once (persistent):
        rindex, rmask, r dims
        r members and reduction accumulations
        reductions finish: tl.sum/max/min(acc, 1)[:, None]
        x members that depend on them
Values of "r" members do not survive their loop: a later loop that needs one recomputes it
from its inputs (no store/reload through memory inside a kernel).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import sympy
import torch
from coil.lowering_ir import Buffer, Constant, Expr, IndexValue, Load, Op, Reduction, Value
from coil.scheduler import KernelGroup, Member
from coil.triton_codegen.config import KernelConfig, choose
from coil.triton_codegen.optable import register_dtype, template, tl_dtype
from coil.triton_codegen.printer import texpr


@dataclass(frozen=True)
class KernelSource:
    """A generated kernel and how to launch it.

    `pointer_args`: storage buffer names passed as pointers, in signature order.
    `size_args`: integer arguments (xnumel[, rnumel]) as sympy expressions of graph sizes.
    `grid`: number of programs along axis 0 (sympy). `constexprs`: block sizes.
    """

    name: str
    source: str
    pointer_args: tuple[str, ...]
    size_args: tuple[Expr, ...]
    constexprs: dict[str, int]
    grid: Expr
    num_warps: int
    strategy: str
    origins: tuple[str, ...]
    stores: tuple[str, ...]


IDENTITY = {"sum": "0", "prod": "1", "any": "0", "all": "1"}


def _inf(dtype: torch.dtype, negative: bool) -> str:
    if dtype.is_floating_point:
        return "float('-inf')" if negative else "float('inf')"
    info = torch.iinfo(dtype)
    return str(info.min if negative else info.max)


@dataclass
class _Scope:
    """CSE cache of one code region (outside loops, or one loop body)."""

    indent: str
    values: dict[tuple[object, ...], str] = field(default_factory=dict)
    members: dict[str, str] = field(default_factory=dict)  # buffer -> var holding its value
    is_r: bool = False


class KernelWriter:
    """Writes one kernel's source. Use `generate(group, buffers, target)`."""

    def __init__(self, group: KernelGroup, buffers: dict[str, Buffer], target: str, strategy: str) -> None:
        self.g = group
        self.buffers = buffers
        self.target = target
        self.lines: list[str] = []
        self.ptrs: dict[str, str] = {}
        self.n = 0
        self.writer: dict[str, Member] = {m.op.output.name: m for m in group.members}
        self.xscope = _Scope("    ")
        self.reduction = group.is_reduction
        xn, rn = group.xnumel, group.rnumel
        self.cfg: KernelConfig = choose(
            int(xn) if isinstance(xn, sympy.Integer) else 1 << 20,
            int(rn) if isinstance(rn, sympy.Integer) else 1 << 20,
            self.reduction, target, strategy,
        )
        touched = {r for m in group.members for r in m.op.reads()} | {m.op.output.name for m in group.members}
        extents = [buffers[b].layout.storage_extent() for b in touched if b in buffers]
        big = any(not isinstance(e, sympy.Integer) or int(e) >= 2**31 for e in extents) or not isinstance(xn * rn, sympy.Integer) or int(xn * rn) >= 2**31
        self.int64 = big

    # -- helpers ---------------------------------------------------------------------------
    def tmp(self) -> str:
        self.n += 1
        return f"tmp{self.n}"

    def ptr(self, buf: str) -> str:
        if buf not in self.ptrs:
            self.ptrs[buf] = f"ptr{len(self.ptrs)}"
        return self.ptrs[buf]

    def emit(self, scope: _Scope, line: str) -> None:
        self.lines.append(scope.indent + line)

    def mask(self, scope: _Scope) -> str:
        return "xmask & rmask" if scope.is_r else "xmask"

    # -- values ----------------------------------------------------------------------------
    def value(self, v: Value, m: Member, scope: _Scope) -> str:
        """A variable holding `v` (of member m) in `scope`, emitting code as needed."""
        if isinstance(v, Constant):
            return self.constant(v, scope)
        if isinstance(v, Load):
            return self.load(v, m, scope)
        if isinstance(v, IndexValue):
            key: tuple[object, ...] = ("idx", m.kernel_expr(v.index), v.dtype)
            if key not in scope.values:
                t = self.tmp()
                idx = texpr(m.kernel_expr(v.index))
                self.emit(scope, f"{t} = ({idx} + {self.zero(scope)}).to({tl_dtype(v.dtype)})")
                scope.values[key] = t
            return scope.values[key]
        assert isinstance(v, Op)
        args = [self.value(a, m, scope) for a in v.args]
        key = ("op", v.name, tuple(args), v.dtype)
        if key in scope.values:
            return scope.values[key]
        t = self.tmp()
        if v.name == "cast":
            src = v.args[0].dtype
            dst = v.dtype
            if dst == torch.bool:
                code = f"({args[0]} != 0)"
            elif dst in (torch.float16, torch.bfloat16):
                code = f"{args[0]}.to({tl_dtype(dst)}).to(tl.float32)"
            elif register_dtype(src) == register_dtype(dst):
                code = args[0]
            else:
                code = f"{args[0]}.to({tl_dtype(register_dtype(dst))})"
        else:
            ct = register_dtype(v.dtype if v.name not in ("eq", "ne", "lt", "le", "gt", "ge", "isnan", "isinf")
                                else v.args[0].dtype)
            code = template(v.name, ct, self.target).format(*args, T=tl_dtype(ct))
        self.emit(scope, f"{t} = {code}")
        scope.values[key] = t
        return t

    def zero(self, scope: _Scope) -> str:
        return "rindex * 0 + xindex * 0" if scope.is_r else "xindex * 0"

    def constant(self, c: Constant, scope: _Scope) -> str:
        key: tuple[object, ...] = ("const", c.value, c.dtype)
        if key in scope.values:
            return scope.values[key]
        t = self.tmp()
        rd = register_dtype(c.dtype)
        val = c.value
        if isinstance(val, float) and (val != val or val in (float("inf"), float("-inf"))):
            lit = "float('nan')" if val != val else ("float('inf')" if val > 0 else "float('-inf')")
        elif c.dtype == torch.bool:
            lit = "1" if val else "0"
        elif rd.is_floating_point:
            lit = repr(float(val))
        else:
            lit = str(int(val))
        self.emit(scope, f"{t} = tl.full([1], {lit}, {tl_dtype(rd)})")
        scope.values[key] = t
        return t

    def load(self, ld: Load, m: Member, scope: _Scope) -> str:
        w = self.writer.get(ld.buffer)
        if w is not None:
            if w.kind != "r":
                return self.xscope.members[ld.buffer] if ld.buffer in self.xscope.members else scope.members[ld.buffer]
            if ld.buffer not in scope.members:  # value from an earlier loop: recompute here
                self.compute_member(w, scope)
            return scope.members[ld.buffer]
        index = m.kernel_expr(ld.index)
        key: tuple[object, ...] = ("load", ld.buffer, index)
        if key in scope.values:
            return scope.values[key]
        t = self.tmp()
        uses_r = any(s.name.startswith("rd") for s in index.free_symbols)
        mask = "xmask & rmask" if uses_r else "xmask"
        if scope.is_r and not uses_r:
            mask = "xmask"
        cast = ".to(tl.float32)" if ld.dtype in (torch.float16, torch.bfloat16) else ""
        where = texpr(index) if index.free_symbols else f"{texpr(index)} + xindex * 0"
        self.emit(scope, f"{t} = tl.load({self.ptr(ld.buffer)} + {where}, {mask}, other=0){cast}")
        scope.values[key] = t
        return t

    def compute_member(self, m: Member, scope: _Scope) -> str:
        v = self.value(m.nest.body, m, scope)
        scope.members[m.op.output.name] = v
        return v

    def store(self, m: Member, var: str, scope: _Scope) -> None:
        name = m.op.output.name
        if name not in self.g.stores:
            return
        e = m.kernel_expr(m.nest.store_index)
        idx = texpr(e) if e.free_symbols else f"{texpr(e)} + {self.zero(scope)}"
        dt = self.buffers[name].layout.dtype
        self.emit(scope, f"tl.store({self.ptr(name)} + {idx}, ({var} + {self.zero(scope)}).to({tl_dtype(dt)}), {self.mask(scope)})")

    # -- structure ---------------------------------------------------------------------------
    def segments(self) -> tuple[dict[int, int], dict[int, int]]:
        """Loop segment of each r/reduce member, and 'after segment' of each x member."""
        seg: dict[int, int] = {}
        after: dict[int, int] = {}
        for i, m in enumerate(self.g.members):
            deps = [self.g.members.index(self.writer[ld.buffer]) for ld in _loads(m) if ld.buffer in self.writer]
            if m.kind == "x":
                after[i] = max([seg[d] if self.g.members[d].kind == "reduce" else after[d] for d in deps
                                if self.g.members[d].kind != "r"], default=-1)
            else:
                s = 0
                for d in deps:
                    k = self.g.members[d].kind
                    s = max(s, seg[d] + 1 if k == "reduce" else seg[d] if k == "r" else after[d] + 1)
                seg[i] = s
        return seg, after

    def generate(self) -> KernelSource:
        g, cfg = self.g, self.cfg
        body_start = len(self.lines)
        xs = self.xscope
        idx_t = ".to(tl.int64)" if self.int64 else ""
        if self.reduction:
            self.emit(xs, f"xindex = (tl.program_id(0){idx_t} * XBLOCK + tl.arange(0, XBLOCK)[:, None])")
        else:
            self.emit(xs, f"xindex = tl.program_id(0){idx_t} * XBLOCK + tl.arange(0, XBLOCK)")
        self.emit(xs, "xmask = xindex < xnumel")
        self._dims(xs, "x", "xindex", g.x_dims)
        if not self.reduction:
            for m in g.members:
                self.store(m, self.compute_member(m, xs), xs)
        elif cfg.strategy == "persistent":
            rs = _Scope("    ", is_r=True)
            rs.values = xs.values
            rs.members = xs.members
            self.emit(rs, "rindex = tl.arange(0, RBLOCK)[None, :]")
            self.emit(rs, "rmask = rindex < rnumel")
            self._dims(rs, "rd", "rindex", g.r_dims)
            for m in g.members:
                if m.kind == "reduce":
                    v = self.value(m.nest.body, m, rs)
                    out = self.finish_persistent(m, v, rs)
                    xs.members[m.op.output.name] = out
                    self.store(m, out, _Scope("    "))
                else:
                    scope = rs if m.kind == "r" else _Scope("    ", xs.values, xs.members)
                    self.store(m, self.compute_member(m, scope), scope)
        else:
            seg, after = self.segments()
            nseg = max(seg.values(), default=-1) + 1
            for s in range(-1, nseg):
                for i, m in enumerate(g.members):
                    if m.kind == "x" and after[i] == s:
                        self.store(m, self.compute_member(m, xs), xs)
                if s + 1 >= nseg:
                    continue
                ms = [(i, m) for i, m in enumerate(g.members) if m.kind != "x" and seg[i] == s + 1]
                self._loop(ms)
        head = self._header()
        body = self.lines[body_start:]
        source = "\n".join([*head, *body]) + "\n"
        size_args: tuple[Expr, ...] = (g.xnumel, g.rnumel) if self.reduction else (g.xnumel,)
        consts = {"XBLOCK": cfg.xblock}
        if self.reduction:
            consts["RBLOCK"] = cfg.rblock
        grid = sympy.ceiling(g.xnumel / cfg.xblock)
        return KernelSource(
            g.name, source, tuple(self.ptrs), size_args, consts, grid, cfg.num_warps, cfg.strategy,
            tuple(g.origins()), tuple(g.stores),
        )

    def _loop(self, ms: list[tuple[int, Member]]) -> None:
        xs = self.xscope
        accs: dict[str, str] = {}
        for _, m in ms:
            if m.kind == "reduce":
                op = m.op
                assert isinstance(op, Reduction)
                a = f"acc_{m.op.output.name}"
                accs[m.op.output.name] = a
                self.emit(xs, f"{a} = tl.full([XBLOCK, RBLOCK], {self.init(op)}, {tl_dtype(register_dtype(op.acc_dtype))})")
        self.emit(xs, "for roffset in range(0, rnumel, RBLOCK):")
        rs = _Scope("        ", is_r=True)
        rs.members = dict(xs.members)
        self.emit(rs, "rindex = roffset + tl.arange(0, RBLOCK)[None, :]")
        self.emit(rs, "rmask = rindex < rnumel")
        self._dims(rs, "rd", "rindex", self.g.r_dims)
        for _, m in ms:
            if m.kind == "reduce":
                op = m.op
                assert isinstance(op, Reduction)
                v = self.value(m.nest.body, m, rs)
                a = accs[op.output.name]
                v = self.to_acc(v, op, rs)
                self.emit(rs, f"{a} = tl.where(xmask & rmask, {self.combine(op.reduction_type, a, v)}, {a})")
            else:
                self.store(m, self.compute_member(m, rs), rs)
        for _, m in ms:
            if m.kind == "reduce":
                op = m.op
                assert isinstance(op, Reduction)
                out = self.tmp()
                self.emit(xs, f"{out} = {self.final(op.reduction_type, accs[op.output.name])}")
                xs.members[op.output.name] = out
                self.store(m, out, xs)

    def to_acc(self, v: str, op: Reduction, scope: _Scope) -> str:
        want = register_dtype(op.acc_dtype)
        if register_dtype(op.body.dtype) == want:
            return v
        t = self.tmp()
        self.emit(scope, f"{t} = {v}.to({tl_dtype(want)})")
        return t

    def init(self, op: Reduction) -> str:
        if op.reduction_type == "max":
            return _inf(op.acc_dtype, True)
        if op.reduction_type == "min":
            return _inf(op.acc_dtype, False)
        return IDENTITY[op.reduction_type]

    def combine(self, rtype: str, a: str, v: str) -> str:
        return {
            "sum": f"{a} + {v}", "prod": f"{a} * {v}", "max": f"tl.maximum({a}, {v})",
            "min": f"tl.minimum({a}, {v})", "any": f"{a} | ({v} != 0)", "all": f"{a} & ({v} != 0)",
        }[rtype]

    def final(self, rtype: str, a: str) -> str:
        return {
            "sum": f"tl.sum({a}, 1)[:, None]", "prod": f"tl.reduce({a}, 1, _coil_mul)[:, None]",
            "max": f"tl.max({a}, 1)[:, None]", "min": f"tl.min({a}, 1)[:, None]",
            "any": f"(tl.max({a}.to(tl.int8), 1) != 0)[:, None]",
            "all": f"(tl.min({a}.to(tl.int8), 1) != 0)[:, None]",
        }[rtype]

    def finish_persistent(self, m: Member, v: str, rs: _Scope) -> str:
        op = m.op
        assert isinstance(op, Reduction)
        v = self.to_acc(v, op, rs)
        masked = self.tmp()
        self.emit(rs, f"{masked} = tl.where(xmask & rmask, {v}, {self.init(op)})")
        out = self.tmp()
        self.emit(rs, f"{out} = {self.final(op.reduction_type, masked)}")
        return out

    def _dims(self, scope: _Scope, prefix: str, index: str, dims: list[Expr]) -> None:
        stride: Expr = sympy.Integer(1)
        strides: list[Expr] = []
        for d in reversed(dims):
            strides.append(stride)
            stride = stride * d
        strides.reverse()
        for j, (d, s) in enumerate(zip(dims, strides, strict=True)):
            code = index if s == 1 else f"({index} // {texpr(s)})"
            if j > 0:
                code = f"({code} % {texpr(d)})"
            self.emit(scope, f"{prefix}{j} = {code}")

    def _header(self) -> list[str]:
        args = [*self.ptrs.values(), "xnumel"]
        if self.reduction:
            args.append("rnumel")
        args.append("XBLOCK: tl.constexpr")
        if self.reduction:
            args.append("RBLOCK: tl.constexpr")
        prov = ", ".join(self.g.origins())
        return [
            f"# kernel {self.g.name}: {self.cfg.strategy}; fused FX nodes: {prov}",
            "@triton.jit",
            f"def {self.g.name}({', '.join(args)}):",
        ]


def _loads(m: Member) -> list[Load]:
    from coil.lowering_ir import loads

    return loads(m.nest.body)


PRELUDE = {
    "cuda": "import triton\nimport triton.language as tl\nfrom triton.language.extra import libdevice\n",
    "interpret": "import triton\nimport triton.language as tl\n",
}
HELPERS = "\n@triton.jit\ndef _coil_mul(a, b):\n    return a * b\n\n"


def generate(group: KernelGroup, buffers: dict[str, Buffer], target: str, strategy: str = "auto") -> KernelSource:
    """Triton source (a whole module) for `group`. target: "cuda" or "interpret"."""
    ks = KernelWriter(group, buffers, target, strategy).generate()
    module = PRELUDE["cuda" if target == "cuda" else "interpret"] + HELPERS + ks.source
    return KernelSource(ks.name, module, ks.pointer_args, ks.size_args, ks.constexprs, ks.grid,
                        ks.num_warps, ks.strategy, ks.origins, ks.stores)
