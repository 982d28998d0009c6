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

import re
from dataclasses import dataclass, field

import sympy
import torch
from coil.lowering_ir import (
    Buffer,
    Constant,
    Expr,
    IndexValue,
    Load,
    Op,
    Reduction,
    Scatter,
    Value,
    loads,
)
from coil.lowering_ir.printing import texpr
from coil.scheduler import KernelGroup, Member
from coil.triton_codegen.casts import HALF, cast_helpers, round_to_half, to_storage
from coil.triton_codegen.config import CodegenOptions, KernelConfig, choose
from coil.triton_codegen.online import online_pairs, unread_after
from coil.triton_codegen.optable import register_dtype, same_width_int, template, tl_dtype
from coil.triton_codegen.tiling import x_contiguous_loads


@dataclass(frozen=True)
class KernelSource:
    """A generated kernel and how to launch it.

    `pointer_args`: storage buffer names passed as pointers, in signature order.
    `size_args`: integer arguments (xnumel[, rnumel]) as sympy expressions of graph sizes.
    `grid`: number of programs along axis 0 (sympy). `constexprs`: block sizes.
    `debug`: the source holds `tl.device_assert`s (CodegenOptions.debug_asserts): compile it in
    Triton's debug mode, without which they are compiled out.
    `plain_loads`: every load reads a floating dtype at an affine index under the block's mask
    alone (no gathered index, no mask computed from data) and nothing is scattered: the
    autotuner's check on synthetic standard-normal data exercises every lane's path
    (`config.candidates` offers such kernels more configurations).
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
    debug: bool = False
    plain_loads: bool = False


_KERNEL_VAR = re.compile(r"^(x|rd|tmp|ind)\d+$")
IDENTITY = {"sum": "0", "prod": "1", "any": "0", "all": "1"}
BIG_INDEX = "2147483647"


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


def _row_has_nan(a: str) -> str:
    """Triton text: whether each row of the [XBLOCK, RBLOCK] tile `a` holds a NaN, as [XBLOCK, 1]."""
    return f"(tl.max(({a} != {a}).to(tl.int8), 1)[:, None] > 0)"


class KernelWriter:
    """Writes one kernel's source. Use `generate(group, buffers, target)`."""

    def __init__(self, group: KernelGroup, buffers: dict[str, Buffer], target: str, strategy: str,
                 hints: dict[sympy.Symbol, int] | None = None, options: CodegenOptions | None = None,
                 reread: bool = False) -> None:
        self.g = group
        self.reread_rows = reread  # persistent: the part after the last reduction reads the row again
        self.options = options or CodegenOptions()
        self.asserts = 0
        self.buffers = buffers
        self.target = target
        self.lines: list[str] = []
        self.ptrs: dict[str, str] = {}
        self.n = 0
        self.symbols: set[sympy.Symbol] = set()
        self.writer: dict[str, Member] = {m.op.output.name: m for m in group.members}
        self.xscope = _Scope("    ")
        # looped reductions: the buffers a later loop of this kernel reads again (eviction hints)
        self.reread: frozenset[str] | None = None
        self.plain_loads = True  # KernelSource.plain_loads, cleared by the first load or store that is not
        self.reduction = group.is_reduction
        xn, rn = group.xnumel, group.rnumel
        self.one_row = bool(sympy.sympify(xn).is_Integer) and int(xn) <= 1  # a whole-tensor reduction: no row shares
        xh, rh = sympy.sympify(xn).xreplace(hints or {}), sympy.sympify(rn).xreplace(hints or {})
        x_contiguous = self.reduction and x_contiguous_loads(group)
        if not isinstance(rn, sympy.Integer) and strategy == "auto":
            # a persistent block sized from a hint would be wrong for larger rows
            strategy = "outer" if x_contiguous and target == "cuda" else "looped"
        self.cfg: KernelConfig = choose(
            int(xh) if isinstance(xh, sympy.Integer) else 1 << 20,
            int(rh) if isinstance(rh, sympy.Integer) else 1 << 20,
            self.reduction, target, strategy, x_contiguous,
        )
        # loops over r only (a persistent block reads each row once anyway): sums of exp(v - max)
        # that accumulate in their max's loop (online.py), and the r members only those sums read
        looped = self.reduction and self.cfg.strategy != "persistent"
        # online variances too, in both loop tilings: along contiguous rows (a layer norm over
        # 16384 x 8192 fp32 on an H200, 2026-11-28, bench/rownorm_variants_probe.py: its loop over
        # 4096 took 0.2568 ms against 0.2639 with a loop for each statistic; Inductor's Welford
        # loop 0.2554) and "outer" (batch-norm statistics, strided along r)
        self.online = online_pairs(group) if looped else {}
        self.unread = unread_after(group, self.online)
        touched = {r for m in group.members for r in m.op.reads()} | {m.op.output.name for m in group.members}
        extents = [buffers[b].layout.storage_extent() for b in touched if b in buffers]
        big = any(not isinstance(e, sympy.Integer) or int(e) >= 2**31 for e in extents) or not isinstance(xn * rn, sympy.Integer) or int(xn * rn) >= 2**31
        self.int64 = big
        # static sizes (positive integers): assigned in the kernel's body, shadowing the arguments,
        # so Triton sees the loops' trip counts and can drop masks the blocks make unnecessary
        # (`index_mask`); Inductor writes static sizes into its kernels the same way. On an H200
        # (2026-11-28, bench/rownorm_variants_probe.py, gpu_session29a.sh) coil's fp32 RMSNorm over
        # 16384 x 8192 read twice (`reread`) took 0.2684 ms with run-time masks, 0.2550 without
        # (Inductor's kernel 0.2545); with this, the bench's RMSNorm runs 0.2536 against
        # Inductor's 0.2549 (gpu_session29b.sh; 0.2605 before)
        self.static = {name: int(e) for name, e in (("xnumel", sympy.sympify(xn)), ("rnumel", sympy.sympify(rn)))
                       if (name == "xnumel" or self.reduction) and e.is_Integer and int(e) > 0}

    # -- helpers ---------------------------------------------------------------------------
    def ix(self, e: Expr) -> str:
        """Print an index expression, recording the size symbols it needs as kernel arguments."""
        for sym in e.free_symbols:
            if not _KERNEL_VAR.match(sym.name):
                self.symbols.add(sym)
        return texpr(e)

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
                e = m.kernel_expr(v.index)
                idx = self.ix(e)
                # [XBLOCK, RBLOCK] only when the index varies along r: an r-invariant value keeps
                # the x shape, so that masks built from it also fit the x-only loads and stores of
                # a persistent kernel (they share values with its r part)
                uses_r = scope.is_r and any(s.name.startswith("rd") for s in e.free_symbols)
                base = f"({idx} + {self.zero(scope) if uses_r else 'xindex * 0'})"
                code = (round_to_half(base, torch.int64, v.dtype, self.target) if v.dtype in HALF
                        else f"{base}.to({tl_dtype(v.dtype)})")
                self.emit(scope, f"{t} = {code}")
                scope.values[key] = t
            return scope.values[key]
        assert isinstance(v, Op)
        seen: tuple[object, ...] = ("id", id(v), id(m))  # a node shared in the DAG: visit it once
        if seen in scope.values:
            return scope.values[seen]
        args = [self.value(a, m, scope) for a in v.args]
        key = ("op", v.name, tuple(args), v.dtype)
        if key in scope.values:
            scope.values[seen] = scope.values[key]
            return scope.values[key]
        t = self.tmp()
        if v.name == "cast":
            src = v.args[0].dtype
            dst = v.dtype
            if dst == torch.bool:
                code = f"({args[0]} != 0)"
            elif dst in HALF:
                code = round_to_half(args[0], src, dst, self.target)
            elif register_dtype(src) == register_dtype(dst):
                code = args[0]
            else:
                code = f"{args[0]}.to({tl_dtype(register_dtype(dst))})"
        else:
            ct = register_dtype(v.dtype if v.name not in ("eq", "ne", "lt", "le", "gt", "ge", "isnan", "isinf", "signbit")
                                else v.args[0].dtype)
            code = template(v.name, ct, self.target).format(*args, T=tl_dtype(ct), I=same_width_int(ct))
        self.emit(scope, f"{t} = {code}")
        scope.values[key] = scope.values[seen] = t
        return t

    def loop_bound(self) -> str:
        """The r loop's bound: `rnumel`, through `_coil_index` on the interpreter (INTERPRET_INDEX),
        static or not: the interpreter turns every assignment's value into a tensor, so a static
        size assigned in the body is a one-element array there too (Triton 3.6, on the H200's host)."""
        return "rnumel" if self.target == "cuda" else "_coil_index(rnumel)"

    def index_mask(self, scope: _Scope, axis: str) -> None:
        """Emit `xmask` (axis "x") or `rmask` ("r"): which lanes of the block are inside the
        size. With the size static (`self.static`) the choice is made when Triton compiles the
        kernel, by a constexpr `if`: all true when the block divides the size (a constant Triton
        folds, so loads, stores and the reductions' `tl.where` lose their predicate), else the
        comparison. The text stays one for every block size the autotuner tries (they differ
        only in constexprs). Otherwise (a symbolic size) the comparison."""
        compare = f"{axis}mask = {axis}index < {axis}numel"
        if f"{axis}numel" not in self.static:
            self.emit(scope, compare)
            return
        block = "XBLOCK" if axis == "x" else "RBLOCK"
        shape = ("[XBLOCK, 1]" if self.reduction else "[XBLOCK]") if axis == "x" else "[1, RBLOCK]"
        self.emit(scope, f"if {axis}numel % {block} == 0:")
        self.emit(scope, f"    {axis}mask = tl.full({shape}, 1, tl.int1)")
        self.emit(scope, "else:")
        self.emit(scope, f"    {compare}")

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
        mask_var = self.value(ld.mask, m, scope) if ld.mask is not None else None
        if mask_var is not None or ld.indirect or not ld.dtype.is_floating_point:
            self.plain_loads = False
        w = self.writer.get(ld.buffer)
        if w is not None:
            if w.kind != "r":
                var = self.xscope.members[ld.buffer] if ld.buffer in self.xscope.members else scope.members[ld.buffer]
            else:
                if ld.buffer not in scope.members:  # value from an earlier loop: recompute here
                    self.compute_member(w, scope)
                var = scope.members[ld.buffer]
            if mask_var is None:
                return var
            t = self.tmp()
            self.emit(scope, f"{t} = tl.where({mask_var}, {var}, 0)")
            return t
        index = m.kernel_expr(ld.index)
        bound = {sym: sympy.Symbol(self.value(val, m, scope), integer=True) for sym, val in ld.indirect}
        index = index.xreplace(bound)
        key: tuple[object, ...] = ("load", ld.buffer, index, mask_var)
        if key in scope.values:
            return scope.values[key]
        t = self.tmp()
        uses_r = scope.is_r and (any(s.name.startswith("rd") for s in index.free_symbols) or bool(bound))
        mask = "xmask & rmask" if uses_r else "xmask"
        rn = sympy.sympify(self.g.rnumel)
        if scope.is_r and not uses_r and not (rn.is_Integer and int(rn) > 0):
            # an r-invariant load of a reduction over an empty range: the tensor may be empty
            # (found by the fuzzer: sum over a 0-size dim of an expanded input read element 0)
            mask = "xmask & (xindex * 0 < rnumel)"
        if mask_var is not None:
            mask = f"{mask} & {mask_var}"
        self.check_bounds("load", ld.buffer, index, list(bound.values()), mask, scope)
        cast = ".to(tl.float32)" if ld.dtype in (torch.float16, torch.bfloat16) else ""
        where = self.ix(index) if _has_loop_var(index) else f"{self.ix(index)} + xindex * 0"
        hint = self.eviction(ld.buffer, index, uses_r, scope)
        self.emit(scope, f"{t} = tl.load({self.ptr(ld.buffer)} + {where}, {mask}, other=0{hint}){cast}")
        scope.values[key] = t
        return t

    def eviction(self, buf: str, index: Expr, uses_r: bool, scope: _Scope) -> str:
        """The L2 eviction hint of a load inside a reduction's r scope (empty elsewhere).

        A load whose index has no x variable reads the same elements for every row (a norm's
        weight): keep it ('evict_last'). In a loop over r, a buffer a later loop of this kernel
        reads again (a norm's input, read for the statistics and again to normalise) is kept
        too, and one read for the last time streams through ('evict_first'), so it does not push
        the kept ones out. A persistent block reads each element once: no hint."""
        if not (self.reduction and scope.is_r and uses_r):
            return ""
        if not self.one_row and not any(s.name.startswith("x") and _KERNEL_VAR.match(s.name) for s in index.free_symbols):
            return ", eviction_policy='evict_last'"
        if self.reread is None:
            return ""
        return ", eviction_policy='evict_last'" if buf in self.reread else ", eviction_policy='evict_first'"

    def compute_member(self, m: Member, scope: _Scope) -> str:
        v = self.value(m.nest.body, m, scope)
        scope.members[m.op.output.name] = v
        return v

    def store(self, m: Member, var: str, scope: _Scope) -> None:
        name = m.op.output.name
        if name not in self.g.stores:
            return
        if isinstance(m.op, Scatter):
            self.scatter_store(m, var, scope)
            return
        e = m.kernel_expr(m.nest.store_index)
        idx = self.ix(e) if _has_loop_var(e) else f"{self.ix(e)} + {self.zero(scope)}"
        dt = self.buffers[name].layout.dtype
        # broadcast by subtracting a zero: x - 0 keeps the sign of -0.0 (x + 0 would make it +0.0).
        # Not needed for a pointwise kernel's value read from memory or computed from the index:
        # it has the block's shape already (on an H200, 2026-11-28, bench/kernel_variants_probe.py:
        # bias+GELU in fp32 over 16384 x 8192 took 0.2576 ms without it against 0.2588 with it)
        full = not self.reduction and self.varies(m.nest.body)
        val = to_storage(f"({var})" if full else f"({var} - {self.zero(scope)})", dt, self.target)
        self.emit(scope, f"tl.store({self.ptr(name)} + {idx}, {val}, {self.mask(scope)})")

    def varies(self, v: Value) -> bool:
        """Whether `v` reads memory or the index somewhere (so it has the block's shape), through
        the members of this kernel it reads; a value of constants alone is a scalar. Each shared
        node is visited once (a body is a DAG)."""
        todo, seen = [v], set()
        while todo:
            x = todo.pop()
            if id(x) in seen:
                continue
            seen.add(id(x))
            if isinstance(x, IndexValue):
                return True
            if isinstance(x, Load):
                w = self.writer.get(x.buffer)
                if w is None:
                    return True
                todo.append(w.nest.body)
            elif isinstance(x, Op):
                todo.extend(x.args)
        return False

    def scatter_store(self, m: Member, var: str, scope: _Scope) -> None:
        """Write one scattered value: its target index comes from loaded indices."""
        op = m.op
        assert isinstance(op, Scatter)
        self.plain_loads = False
        bound = {s: sympy.Symbol(self.value(v, m, scope), integer=True) for s, v in op.target.indirect}
        e = m.kernel_expr(op.target.index).xreplace(bound)
        idx = self.ix(e) if e.free_symbols else f"{self.ix(e)} + {self.zero(scope)}"
        mask = self.mask(scope)
        if op.target.mask is not None:
            mask = f"{mask} & {self.value(op.target.mask, m, scope)}"
        self.check_bounds("scatter", op.output.name, e, list(bound.values()), mask, scope)
        torch_dt = self.buffers[op.output.name].layout.dtype
        val = to_storage(f"({var} - {self.zero(scope)})", torch_dt, self.target)  # keeps -0.0
        if op.accumulate and torch_dt == torch.bool:
            # bool add is logical or; atomics lack int1: store True where the value is True
            # (every racing writer stores the same value, so plain stores are exact)
            self.emit(scope, f"tl.store({self.ptr(op.output.name)} + {idx}, {val}, {mask} & {val})")
            return
        fn = "tl.atomic_add" if op.accumulate else "tl.store"
        self.emit(scope, f"{fn}({self.ptr(op.output.name)} + {idx}, {val}, {mask})")

    def check_bounds(self, what: str, buf: str, index: Expr, loaded: list[sympy.Symbol], mask: str,
                     scope: _Scope) -> None:
        """With `debug_asserts`, assert a data-dependent access of `buf` stays inside it.

        `index` is the storage index with each loaded index value already a variable (`loaded`).
        Per loaded index: 0 <= value < size of the dim it indexes (the dim of `buf`'s layout whose
        stride is the value's coefficient; skipped when that is ambiguous). Then the whole index:
        0 <= index < storage extent of `buf`, which bounds every access whatever the view. Lanes
        outside `mask` are exempt. Accesses with no loaded index are affine in the loop variables
        and in range by construction: no assert.
        """
        if not self.options.debug_asserts or not loaded:
            return
        layout = self.buffers[buf].layout
        for var in loaded:
            coeff = sympy.diff(index, var)  # the stride the value is scaled by (linear in it)
            if coeff == 0 or _has_loop_var(coeff):
                continue
            sizes = {layout.size[d] for d, st in enumerate(layout.stride) if sympy.sympify(st) == coeff}
            if len(sizes) == 1:
                size = sizes.pop()
                self.emit(scope, f"tl.device_assert((({var.name} >= 0) & ({var.name} < {self.ix(sympy.sympify(size))}))"
                                 f" | ~({mask}), \"coil bounds: {self.g.name} {what} of {buf}: an index is outside"
                                 f" [0, {size}) of the dim it indexes\")")
        idx, extent = self.ix(index), sympy.sympify(layout.storage_extent())
        self.emit(scope, f"tl.device_assert((({idx} >= 0) & ({idx} < {self.ix(extent)})) | ~({mask}), "
                         f"\"coil bounds: {self.g.name} {what} of {buf}: storage index outside [0, {extent})\")")
        self.asserts += 1

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
                    if i in self.online and d in self.online[i].deps:  # accumulated in the max's loop
                        s = max(s, seg[self.online[i].max_index])
                        continue
                    s = max(s, seg[d] + 1 if k == "reduce" else seg[d] if k == "r" else after[d] + 1)
                seg[i] = s
        return seg, after

    def generate(self) -> KernelSource:
        g, cfg = self.g, self.cfg
        body_start = len(self.lines)
        xs = self.xscope
        idx_t = ".to(tl.int64)" if self.int64 else ""
        for name, size in self.static.items():
            self.emit(xs, f"{name} = {size}")
        if self.reduction:
            self.emit(xs, f"xindex = (tl.program_id(0){idx_t} * XBLOCK + tl.arange(0, XBLOCK)[:, None])")
        else:
            self.emit(xs, f"xindex = tl.program_id(0){idx_t} * XBLOCK + tl.arange(0, XBLOCK)")
        self.index_mask(xs, "x")
        self._dims(xs, "x", "xindex", g.x_dims)
        if g.members[0].kind == "scan":
            self._scan(g.members[0])
        elif not self.reduction:
            for m in g.members:
                self.store(m, self.compute_member(m, xs), xs)
        elif cfg.strategy == "persistent":
            rs = _Scope("    ", is_r=True)
            rs.values = xs.values
            rs.members = xs.members
            self.emit(rs, "rindex = tl.arange(0, RBLOCK)[None, :]")
            self.index_mask(rs, "r")
            self._dims(rs, "rd", "rindex", g.r_dims)
            prefetched = False
            last = max((i for i, m in enumerate(g.members) if m.kind == "reduce"), default=-1)
            post = self.reread_scope(last) if self.reread_rows else None
            for i, m in enumerate(g.members):
                if post is not None and i > last and m.kind == "r":
                    self.reread = frozenset()  # read for the last time: evict_first
                    self.store(m, self.compute_member(m, post), post)
                elif m.kind == "reduce":
                    v = self.value(m.nest.body, m, rs)
                    if not prefetched:  # after the first row's loads: they and the per-row ones wait together
                        self.prefetch(xs)
                        prefetched = True
                    out = self.finish_persistent(m, v, rs)
                    xs.members[m.op.output.name] = out
                    self.store(m, out, _Scope("    "))
                else:
                    scope = rs if m.kind == "r" else _Scope("    ", xs.values, xs.members)
                    self.store(m, self.compute_member(m, scope), scope)
            self.reread = None
        else:
            seg, after = self.segments()
            nseg = max(seg.values(), default=-1) + 1
            self.prefetch(xs)
            for s in range(-1, nseg):
                for i, m in enumerate(g.members):
                    if m.kind == "x" and after[i] == s:
                        self.store(m, self.compute_member(m, xs), xs)
                if s + 1 >= nseg:
                    continue
                ms = [(i, m) for i, m in enumerate(g.members)
                      if m.kind != "x" and seg[i] == s + 1 and i not in self.unread]
                if not ms:
                    continue
                self.reread = frozenset(ld.buffer for i, m in enumerate(g.members)
                                        if m.kind != "x" and seg[i] > s + 1 and i not in self.unread for ld in _loads(m))
                self._loop(ms)
            self.reread = None
        for e in (g.xnumel, g.rnumel):
            self.ix(sympy.sympify(e))
        syms = tuple(sorted(self.symbols, key=lambda x: x.name))
        head = self._header(syms)
        body = self.lines[body_start:]
        source = "\n".join([*head, *body]) + "\n"
        size_args: tuple[Expr, ...] = ((g.xnumel, g.rnumel) if self.reduction else (g.xnumel,)) + syms
        consts = {"XBLOCK": cfg.xblock}
        if self.reduction:
            consts["RBLOCK"] = cfg.rblock
        grid = sympy.ceiling(g.xnumel / cfg.xblock)
        return KernelSource(
            g.name, source, tuple(self.ptrs), size_args, consts, grid, cfg.num_warps, cfg.strategy,
            tuple(g.origins()), tuple(g.stores), self.asserts > 0, self.plain_loads,
        )

    def reread_scope(self, last: int) -> _Scope | None:
        """`generate(..., reread=True)` for a persistent kernel: the scope in which its r members
        after the last reduction (`last`, a member index) are computed, or None when there are
        none that load anything along r.

        The scope starts with no cached values and no r members' results (x members' and
        reductions' come from the x scope, `load`), so those r members load the row again and
        recompute what they need from it, instead of holding the row (and values computed from
        it) in registers across the reductions; the same operations on the same values, so the
        results are the same bits. The buffers they read again get 'evict_last' where they are
        first read (`self.reread`) and 'evict_first' where they are read again. What Inductor's layer norm does with its second loop over a
        row that was read whole in its first (bench/kernel_variants_probe.py, docs/perf.md)."""
        g = self.g
        again = self.memory_reads([m for i, m in enumerate(g.members) if i > last and m.kind == "r"])
        again &= self.memory_reads([m for i, m in enumerate(g.members) if i <= last and m.kind != "x"])
        if last < 0 or not again:
            return None
        self.reread = frozenset(again)
        return _Scope("    ", {}, {}, is_r=True)  # x members and reductions: read from xscope.members

    def memory_reads(self, ms: list[Member]) -> set[str]:
        """The buffers in memory that computing `ms` loads (through the r members they read)."""
        out: set[str] = set()
        seen: set[str] = set()
        todo = list(ms)
        while todo:
            for ld in _loads(todo.pop()):
                w = self.writer.get(ld.buffer)
                if w is None:
                    out.add(ld.buffer)
                elif w.kind == "r" and ld.buffer not in seen:
                    seen.add(ld.buffer)
                    todo.append(w)
        return out

    def prefetch(self, xs: _Scope) -> None:
        """Issue a reduction kernel's per-row loads before its reductions.

        A per-row (x) member after a reduction (a loss's term per row: the target's index, then
        the target logit gathered from the row) would otherwise load only once the row's
        reductions are done, and each program would then wait for memory twice more. Here, in
        x scope (a persistent kernel: after its first reduction's row loads, so that those and
        the per-row ones are in flight together; a looped one: before its first loop), every x
        member that reads only the kernel's inputs and such members is computed (not stored),
        and every other x member's loads whose index, mask and indirect indices need only those
        are issued. A member computed later reuses these variables (the scope's value cache).
        Loads only move earlier: a buffer this kernel writes is never loaded from memory (its
        values are the kernel's registers), so no load moves across a store of what it reads."""
        early: set[str] = set()

        def ready(ld: Load) -> bool:
            return all(inner.buffer not in self.writer or inner.buffer in early for inner in loads(ld))

        for m in self.g.members:
            if m.kind != "x":
                continue
            lds = _loads(m)
            if all(ready(ld) for ld in lds):
                self.compute_member(m, xs)
                early.add(m.op.output.name)
                continue
            for ld in lds:
                if ld.buffer not in self.writer and ready(ld):
                    self.load(ld, m, xs)

    def _loop(self, ms: list[tuple[int, Member]]) -> None:
        xs = self.xscope
        accs: dict[str, str] = {}
        for i, m in ms:
            if m.kind == "reduce":
                op = m.op
                assert isinstance(op, Reduction)
                a = f"acc_{m.op.output.name}"
                accs[m.op.output.name] = a
                self.emit(xs, f"{a} = tl.full([XBLOCK, RBLOCK], {self.init(op)}, {tl_dtype(register_dtype(op.acc_dtype))})")
                if i in self.online and self.online[i].kind == "variance":  # Welford's count and mean per lane
                    self.emit(xs, f"{a}_n = tl.full([XBLOCK, RBLOCK], 0, tl.float32)")
                    self.emit(xs, f"{a}_mean = tl.full([XBLOCK, RBLOCK], 0, tl.float32)")
                if op.reduction_type in ("argmax", "argmin"):
                    self.emit(xs, f"{a}_i = tl.full([XBLOCK, RBLOCK], 0, tl.int64)")
        self.emit(xs, f"for roffset in range(0, {self.loop_bound()}, RBLOCK):")
        rs = _Scope("        ", is_r=True)
        rs.members = dict(xs.members)
        self.emit(rs, "rindex = roffset + tl.arange(0, RBLOCK)[None, :]")
        self.index_mask(rs, "r")
        self._dims(rs, "rd", "rindex", self.g.r_dims)
        here = {i for i, _ in ms}
        partner = {o.max_index: i for i, o in self.online.items() if i in here}  # max -> its online sum
        for i, m in ms:
            if m.kind == "reduce":
                op = m.op
                assert isinstance(op, Reduction)
                if i in self.online:
                    continue  # accumulated with its max (below)
                v = self.value(m.nest.body, m, rs)
                a = accs[op.output.name]
                v = self.to_acc(v, op, rs)
                if i in partner and self.online[partner[i]].kind == "variance":
                    self.emit(rs, f"{a} = tl.where(xmask & rmask, {self.combine(op.reduction_type, a, v)}, {a})")
                    self.variance_step(v, accs[self.g.members[partner[i]].op.output.name], rs)
                elif i in partner:
                    self.online_step(a, v, partner[i], accs, rs)
                elif op.reduction_type in ("argmax", "argmin"):
                    cmp = ">" if op.reduction_type == "argmax" else "<"
                    take = self.tmp()
                    better = f"({v} {cmp} {a})"
                    if register_dtype(op.acc_dtype).is_floating_point:  # a lane's first NaN wins, as eager's
                        better = f"({better} | (({v} != {v}) & ({a} == {a})))"
                    self.emit(rs, f"{take} = xmask & rmask & {better}")
                    self.emit(rs, f"{a} = tl.where({take}, {v}, {a})")
                    self.emit(rs, f"{a}_i = tl.where({take}, (rindex + xindex * 0).to(tl.int64), {a}_i)")
                else:
                    self.emit(rs, f"{a} = tl.where(xmask & rmask, {self.combine(op.reduction_type, a, v)}, {a})")
            else:
                self.store(m, self.compute_member(m, rs), rs)
        for i, m in ms:
            if m.kind == "reduce":
                op = m.op
                assert isinstance(op, Reduction)
                out = self.tmp()
                if i in self.online and self.online[i].kind == "variance":
                    self.variance_final(out, i, accs[op.output.name])
                elif i in self.online:
                    mx = self.g.members[self.online[i].max_index].op.output.name
                    self.emit(xs, f"{out} = tl.sum({accs[op.output.name]} * tl.exp({accs[mx]} - {xs.members[mx]}), 1)[:, None]")
                elif op.reduction_type in ("argmax", "argmin"):
                    self.emit(xs, self.arg_final(out, op.reduction_type, accs[op.output.name], f"{accs[op.output.name]}_i",
                                                 register_dtype(op.acc_dtype)))
                else:
                    self.emit(xs, f"{out} = {self.final(op.reduction_type, accs[op.output.name], register_dtype(op.acc_dtype))}")
                xs.members[op.output.name] = out
                self.store(m, out, xs)

    def variance_step(self, v: str, q: str, rs: _Scope) -> None:
        """One loop step of an online variance (online.py): this step's values `v` (the partner
        sum's, in float32) update each lane's Welford count `{q}_n`, mean `{q}_mean` and M2 `q`.

        With a static row size that the block divides (a constexpr `if`, as `index_mask`'s),
        every lane takes every step, so each lane's count is the step's number: the mean's
        update multiplies by one reciprocal per step instead of dividing each element by its
        lane's count (an IEEE division is a dozen instructions; H200, session 30: the fp32
        layer norm's loop 0.2570 -> 0.2547 ms). The two differ by rounding only."""
        n, d = self.tmp(), self.tmp()
        self.emit(rs, f"{n} = {q}_n + 1.0")
        self.emit(rs, f"{d} = {v} - {q}_mean")
        divided = f"{q}_mean = tl.where(xmask & rmask, {q}_mean + {d} / {n}, {q}_mean)"
        if "rnumel" in self.static:
            self.emit(rs, "if rnumel % RBLOCK == 0:")
            self.emit(rs, f"    {q}_mean = tl.where(xmask & rmask, {q}_mean + {d} * (1.0 / (roffset // RBLOCK + 1)), {q}_mean)")
            self.emit(rs, "else:")
            self.emit(rs, f"    {divided}")
        else:
            self.emit(rs, divided)
        self.emit(rs, f"{q} = tl.where(xmask & rmask, {q} + {d} * ({v} - {q}_mean), {q})")
        self.emit(rs, f"{q}_n = tl.where(xmask & rmask, {n}, {q}_n)")

    def variance_final(self, out: str, i: int, q: str) -> None:
        """`out` = sum((v - m)^2) over the row from the lanes' Welford states, where `m` is the
        mean member computed from the partner's finished sum (in the x scope, as the kernel
        computes it after the loop: the same variable, emitted once)."""
        xs = self.xscope
        mm = self.g.members[self.online[i].mean]
        m = self.value(mm.nest.body, mm, xs)
        gap = self.tmp()
        self.emit(xs, f"{gap} = {q}_mean - {m}")
        self.emit(xs, f"{out} = tl.sum({q} + {q}_n * {gap} * {gap}, 1)[:, None]")

    def online_step(self, a: str, v: str, i: int, accs: dict[str, str], rs: _Scope) -> None:
        """One loop step of a max (accumulator `a`, this step's values `v`) and of member `i`, the
        sum of exp(value - max) that accumulates with it (online.py): the sum is rescaled to the
        new running max, and stays 0 while nothing but -inf has been seen."""
        m, o = self.g.members[i], self.online[i]
        op = m.op
        assert isinstance(op, Reduction)
        e = self.to_acc(self.value(o.value, m, rs), op, rs)
        s, new = accs[op.output.name], self.tmp()
        self.emit(rs, f"{new} = tl.where(xmask & rmask, {self.combine('max', a, v)}, {a})")
        self.emit(rs, f"{s} = tl.where(xmask & rmask, tl.where({new} == float('-inf'), 0.0, "
                      f"{s} * tl.exp({a} - {new}) + tl.exp({e} - {new})), {s})")
        self.emit(rs, f"{a} = {new}")

    def _scan(self, m: Member) -> None:
        """A cumulative sum/product along r: one block (persistent) or blocks with a carry."""
        op = m.op
        assert isinstance(op, Reduction)
        xs = self.xscope
        fn = "tl.cumsum" if op.reduction_type == "cumsum" else "tl.cumprod"
        ident = "0" if op.reduction_type == "cumsum" else "1"
        acc_t = tl_dtype(register_dtype(op.acc_dtype))
        looped = self.cfg.strategy in ("looped", "outer")
        if looped:
            self.emit(xs, f"carry = tl.full([XBLOCK, 1], {ident}, {acc_t})")
            self.emit(xs, f"for roffset in range(0, {self.loop_bound()}, RBLOCK):")
            rs = _Scope("        ", is_r=True)
            self.emit(rs, "rindex = roffset + tl.arange(0, RBLOCK)[None, :]")
        else:
            rs = _Scope("    ", is_r=True)
            self.emit(rs, "rindex = tl.arange(0, RBLOCK)[None, :]")
        rs.members = dict(xs.members)
        self.index_mask(rs, "r")
        self._dims(rs, "rd", "rindex", self.g.r_dims)
        v = self.to_acc(self.value(m.nest.body, m, rs), op, rs)
        masked, out = self.tmp(), self.tmp()
        self.emit(rs, f"{masked} = tl.where(xmask & rmask, {v}, {ident}).to({acc_t})")
        self.emit(rs, f"{out} = {fn}({masked}, 1)")
        if looped:
            combine = "+" if op.reduction_type == "cumsum" else "*"
            total = "tl.sum" if op.reduction_type == "cumsum" else "tl.reduce"
            tot = f"tl.sum({masked}, 1)[:, None]" if total == "tl.sum" else f"tl.reduce({masked}, 1, _coil_mul)[:, None]"
            res = self.tmp()
            self.emit(rs, f"{res} = {out} {combine} carry")
            self.emit(rs, f"carry = carry {combine} {tot}")
            out = res
        self.g.stores = [op.output.name]
        self.store(m, out, rs)

    def to_acc(self, v: str, op: Reduction, scope: _Scope) -> str:
        want = register_dtype(op.acc_dtype)
        if register_dtype(op.body.dtype) == want:
            return v
        t = self.tmp()
        self.emit(scope, f"{t} = {v}.to({tl_dtype(want)})")
        return t

    def init(self, op: Reduction) -> str:
        if op.reduction_type in ("max", "argmax"):
            return _inf(op.acc_dtype, True)
        if op.reduction_type in ("min", "argmin"):
            return _inf(op.acc_dtype, False)
        return IDENTITY[op.reduction_type]

    def combine(self, rtype: str, a: str, v: str) -> str:
        nan = f"({a} != {a}) | ({v} != {v})"  # false for integers
        return {
            "sum": f"{a} + {v}", "prod": f"{a} * {v}",
            "max": f"tl.where({nan}, {a} + {v}, tl.maximum({a}, {v}))",
            "min": f"tl.where({nan}, {a} + {v}, tl.minimum({a}, {v}))",
            "any": f"{a} | ({v} != 0)", "all": f"{a} & ({v} != 0)",
        }[rtype]

    def final(self, rtype: str, a: str, acc: torch.dtype) -> str:
        """The row's total of `a` (registers of dtype `acc`), kept as an [XBLOCK, 1] column. A
        float max or min propagates NaN as eager does (tl.max alone returns the other operand):
        one tl.reduce whose combine is NaN-propagating (PTX max.NaN / min.NaN for float32 and
        the half types); float64, which PTX has no such instruction for, takes a reduction of
        the row's NaN flags beside tl.max."""
        ext = {"max": "tl.max", "min": "tl.min"}
        if rtype in ext and acc.is_floating_point:
            if acc == torch.float64:
                has_nan = _row_has_nan(a)
                return f"tl.where({has_nan}, float('nan'), {ext[rtype]}({a}, 1)[:, None])"
            return f"tl.reduce({a}, 1, _coil_{rtype}_nan)[:, None]"
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
        if op.reduction_type in ("argmax", "argmin"):
            self.emit(rs, self.arg_final(out, op.reduction_type, masked, "(rindex + xindex * 0).to(tl.int64)",
                                         register_dtype(op.acc_dtype)))
        else:
            self.emit(rs, f"{out} = {self.final(op.reduction_type, masked, register_dtype(op.acc_dtype))}")
        return out

    def arg_final(self, out: str, rtype: str, vals: str, idx: str, acc: torch.dtype) -> str:
        """Index of the first extreme value along the row: the smallest index attaining it. For
        floats a NaN is the extreme of both argmax and argmin, as in eager: a row holding NaN
        gives its first NaN's index (`vals` and `idx` are per lane: the looped form keeps each
        lane's first NaN, see the loop's update)."""
        ext = "tl.max" if rtype == "argmax" else "tl.min"
        hit = f"({vals} == {ext}({vals}, 1)[:, None])"
        if acc.is_floating_point:
            nan = f"({vals} != {vals})"
            hit = f"tl.where({_row_has_nan(vals)}, {nan}, {hit})"
        return f"{out} = tl.min(tl.where({hit}, {idx}, {BIG_INDEX}), 1)[:, None]"

    def _dims(self, scope: _Scope, prefix: str, index: str, dims: list[Expr]) -> None:
        stride: Expr = sympy.Integer(1)
        strides: list[Expr] = []
        for d in reversed(dims):
            strides.append(stride)
            stride = stride * d
        strides.reverse()
        for j, (d, s) in enumerate(zip(dims, strides, strict=True)):
            code = index if s == 1 else f"({index} // {self.ix(s)})"
            if j > 0:
                code = f"({code} % {self.ix(d)})"
            self.emit(scope, f"{prefix}{j} = {code}")

    def _header(self, syms: tuple[sympy.Symbol, ...]) -> list[str]:
        args = [*self.ptrs.values(), "xnumel"]
        if self.reduction:
            args.append("rnumel")
        args += [s.name for s in syms]
        args.append("XBLOCK: tl.constexpr")
        if self.reduction:
            args.append("RBLOCK: tl.constexpr")
        prov = ", ".join(self.g.origins())
        return [
            f"# kernel {self.g.name}: {self.cfg.strategy}; fused FX nodes: {prov}",
            "@triton.jit",
            f"def {self.g.name}({', '.join(args)}):",
        ]


def _has_loop_var(e: Expr) -> bool:
    return any(_KERNEL_VAR.match(s.name) for s in e.free_symbols)


def _loads(m: Member) -> list[Load]:
    return loads(m.nest.body)


PRELUDE = {
    "cuda": "import triton\nimport triton.language as tl\nfrom triton.language.extra import libdevice\n",
    "interpret": "import triton\nimport triton.language as tl\n",
}
# the combine functions of reductions emitted as tl.reduce (prod; a float max/min propagating NaN,
# KernelWriter.final), each added to the kernels that call it. coil.runtime.interpreter matches
# them by name (its numpy path for Triton's interpreter): rename or add one in both places
# (tests-integration/test_reductions.py fails otherwise)
HELPERS = {
    "_coil_mul": "\n@triton.jit\ndef _coil_mul(a, b):\n    return a * b\n\n",
    "_coil_max_nan": "\n@triton.jit\ndef _coil_max_nan(a, b):\n    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)\n\n",
    "_coil_min_nan": "\n@triton.jit\ndef _coil_min_nan(a, b):\n    return tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)\n\n",
}
# the interpreter has no libdevice: atan by range reduction and an odd polynomial (error < 2e-7)
INTERPRET_HELPERS = """
@triton.jit
def _coil_atan(x):
    ax = tl.abs(x)
    big = ax > 1.0
    t = tl.where(big, 1.0 / tl.where(ax == 0, 1.0, ax), ax)
    mid = t > 0.41421356237309503
    u = tl.where(mid, (t - 1.0) / (t + 1.0), t)
    u2 = u * u
    p = u * (1.0 + u2 * (-0.3333333333333333 + u2 * (0.2 + u2 * (-0.14285714285714285 + u2 * (
        0.1111111111111111 + u2 * (-0.09090909090909091 + u2 * 0.07692307692307693))))))
    r = tl.where(mid, 0.7853981633974483 + p, p)
    r = tl.where(big, 1.5707963267948966 - r, r)
    return tl.where(x < 0, -r, r)


@triton.jit
def _coil_atan2(y, x):
    base = _coil_atan(y / tl.where(x == 0, 1.0, x))
    pi = 3.141592653589793
    r = tl.where(x > 0, base, tl.where(y >= 0, base + pi, base - pi))
    return tl.where(x == 0, tl.where(y > 0, pi / 2, tl.where(y < 0, -pi / 2, 0.0 * y)), r)

"""


# a plain function, run as Python by the interpreter: a run-time int argument reaches an interpreted
# kernel as a tensor over a one-element array, and Triton before 3.9 converts it for `range` with
# int(array), which NumPy 2 refuses ("only 0-dimensional arrays can be converted to Python
# scalars"): every loop over a run-time bound failed there
INTERPRET_INDEX = """
def _coil_index(n):
    handle = getattr(n, "handle", None)
    return int(handle.data.reshape(-1)[0]) if handle is not None else int(n)

"""


def _helpers(source: str, target: str) -> str:
    """The helper functions `source` calls (only those: each @triton.jit costs ~2 ms to load)."""
    out = "".join(h for name, h in HELPERS.items() if name in source) + cast_helpers(source)
    if target != "cuda" and "_coil_atan" in source:  # _coil_atan2 calls _coil_atan
        out += INTERPRET_HELPERS
    if target != "cuda" and "_coil_index(" in source:
        out += INTERPRET_INDEX
    return out


def generate(group: KernelGroup, buffers: dict[str, Buffer], target: str, strategy: str = "auto",
             hints: dict[sympy.Symbol, int] | None = None, options: CodegenOptions | None = None,
             *, reread: bool = False) -> KernelSource:
    """Triton source (a whole module) for `group`. target: "cuda" or "interpret".

    Size symbols the kernel needs become integer arguments after xnumel/rnumel (listed in
    `size_args`); `hints` (example values) only pick block sizes. `options` (default: all off)
    adds checks, e.g. bounds asserts on data-dependent accesses (then `KernelSource.debug`).
    `reread`: a persistent reduction kernel reads its rows again after its last reduction
    instead of holding them in registers (`KernelWriter.reread_scope`; the same results, another
    text; an autotuning alternative, `variants.reread_alternative`); no effect on other kernels.
    """
    ks = KernelWriter(group, buffers, target, strategy, hints, options, reread).generate()
    module = PRELUDE["cuda" if target == "cuda" else "interpret"] + _helpers(ks.source, target) + ks.source
    return KernelSource(ks.name, module, ks.pointer_args, ks.size_args, ks.constexprs, ks.grid,
                        ks.num_warps, ks.strategy, ks.origins, ks.stores, ks.debug, ks.plain_loads)
