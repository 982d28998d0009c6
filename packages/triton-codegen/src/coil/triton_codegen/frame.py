"""The frame of one kernel's text: the state every part shares, names, index and mask lines,
and the signature.

`KernelFrame` holds the group, its launch configuration and what the writing collects (lines,
pointer arguments, size symbols, counters), and writes the parts of a kernel every strategy
has: `xindex`/`rindex` and the group's dims by div/mod, the masks (`index_mask`: static sizes
let Triton drop them when the block divides the size), the r loop's bound, the `def` line and
the loads of addresses from a table (`indirect`).
Values, loads and stores (values.py, memory.py), reductions (reductions.py) and the kernel's
structure (kernel.py) build on it, each a subclass of the previous.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import sympy
from coil.lowering_ir import Buffer, Expr, Load, loads
from coil.lowering_ir.printing import texpr
from coil.scheduler import KernelGroup, Member
from coil.triton_codegen.config import CodegenOptions, KernelConfig
from coil.triton_codegen.indirect import IndirectReads
from coil.triton_codegen.online import online_pairs, unread_after

KERNEL_VAR = re.compile(r"^(x|rd|tmp|ind)\d+$")  # the kernel's own variables (not size arguments)
PROGRAM_ID = "tl.program_id(0)"  # how a kernel reads its program index (a combo's part takes `pid` instead)


def has_loop_var(e: Expr) -> bool:
    """Whether `e` uses a variable of the kernel (it then has the block's shape)."""
    return any(KERNEL_VAR.match(s.name) for s in e.free_symbols)


def member_loads(m: Member) -> list[Load]:
    """The loads of `m`'s body."""
    return loads(m.nest.body)


@dataclass
class Scope:
    """CSE cache of one code region (outside loops, or one loop body)."""

    indent: str
    values: dict[tuple[object, ...], str] = field(default_factory=dict)
    members: dict[str, str] = field(default_factory=dict)  # buffer -> var holding its value
    is_r: bool = False


class KernelFrame:
    """The state of one kernel being written (module docstring). `cfg`: its launch configuration
    (kernel.py's `kernel_config`); `reread`: a persistent kernel reads its rows again after its
    last reduction (`KernelWriter.reread_scope`); `indirect`: pointer arguments the kernel loads
    from a table of addresses (its first lines, and its name)."""

    def __init__(self, group: KernelGroup, buffers: dict[str, Buffer], target: str, cfg: KernelConfig,
                 options: CodegenOptions | None = None, reread: bool = False,
                 indirect: IndirectReads | None = None) -> None:
        self.g = group
        self.indirect = indirect  # pointer arguments loaded from a table of addresses (indirect.py)
        self.name = indirect.kernel_name(group.name) if indirect is not None else group.name
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
        self.xscope = Scope("    ")
        # looped reductions: the buffers a later loop of this kernel reads again (eviction hints)
        self.reread: frozenset[str] | None = None
        self.plain_loads = True  # KernelSource.plain_loads, cleared by the first load or store that is not
        self.reduction = group.is_reduction
        # the program's index: a combo kernel's part takes it as an argument `pid` (combo.py)
        self.program_id = PROGRAM_ID
        xn, rn = group.xnumel, group.rnumel
        self.one_row = bool(sympy.sympify(xn).is_Integer) and int(xn) <= 1  # a whole-tensor reduction: no row shares
        self.cfg = cfg
        # loops over r only (a persistent block reads each row once anyway): sums of exp(v - max)
        # that accumulate in their max's loop (online.py), and the r members only those sums read
        looped = self.reduction and self.cfg.strategy != "persistent"
        # online variances too, in both loop tilings: along contiguous rows (a layer norm: one loop
        # instead of one per statistic) and "outer" (batch-norm statistics, strided along r)
        self.online = online_pairs(group) if looped else {}
        self.unread = unread_after(group, self.online)
        touched = {r for m in group.members for r in m.op.reads()} | {m.op.output.name for m in group.members}
        extents = [buffers[b].layout.storage_extent() for b in touched if b in buffers]
        big = any(not isinstance(e, sympy.Integer) or int(e) >= 2**31 for e in extents) or not isinstance(xn * rn, sympy.Integer) or int(xn * rn) >= 2**31
        self.int64 = big
        # static sizes (positive integers): assigned in the kernel's body, shadowing the arguments,
        # so Triton sees the loops' trip counts and can drop masks the blocks make unnecessary
        # (`index_mask`); Inductor writes static sizes into its kernels the same way (masks left
        # to run time cost memory-bound kernels several percent: docs/perf.md, "Codegen, runtime and lowering choices")
        self.static = {name: int(e) for name, e in (("xnumel", sympy.sympify(xn)), ("rnumel", sympy.sympify(rn)))
                       if (name == "xnumel" or self.reduction) and e.is_Integer and int(e) > 0}

    def ix(self, e: Expr) -> str:
        """Print an index expression, recording the size symbols it needs as kernel arguments."""
        for sym in e.free_symbols:
            if not KERNEL_VAR.match(sym.name):
                self.symbols.add(sym)
        return texpr(e)

    def tmp(self) -> str:
        self.n += 1
        return f"tmp{self.n}"

    def ptr(self, buf: str) -> str:
        if buf not in self.ptrs:
            self.ptrs[buf] = f"ptr{len(self.ptrs)}"
        return self.ptrs[buf]

    def emit(self, scope: Scope, line: str) -> None:
        self.lines.append(scope.indent + line)

    def mask(self, scope: Scope) -> str:
        return "xmask & rmask" if scope.is_r else "xmask"

    def zero(self, scope: Scope) -> str:
        return "rindex * 0 + xindex * 0" if scope.is_r else "xindex * 0"

    def loop_bound(self) -> str:
        """The r loop's bound: `rnumel`, through `_coil_index` on the interpreter (INTERPRET_INDEX),
        static or not: the interpreter turns every assignment's value into a tensor, so a static
        size assigned in the body is a one-element array there too (Triton 3.6)."""
        return "rnumel" if self.target == "cuda" else "_coil_index(rnumel)"

    def index_mask(self, scope: Scope, axis: str) -> None:
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

    def _dims(self, scope: Scope, prefix: str, index: str, dims: list[Expr]) -> None:
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

    def signature_facts(self, sizes: tuple[object, ...]) -> tuple[tuple[sympy.Symbol, ...], tuple[str, ...]]:
        """After the body is written: the size symbols the kernel takes (those of `sizes`, the
        launch's element counts, included), sorted by name, and its pointer arguments (the
        table's, checked against the stores, when it reads through a table of addresses)."""
        for e in sizes:
            self.ix(sympy.sympify(e))
        syms = tuple(sorted(self.symbols, key=lambda x: x.name))
        pointer_args = tuple(self.ptrs)
        if self.indirect is not None:
            self.indirect.check(self.g.name, pointer_args, self.g.stores)
            pointer_args = self.indirect.pointer_args(pointer_args)
        return syms, pointer_args

    def _header(self, syms: tuple[sympy.Symbol, ...]) -> list[str]:
        args = [*self.ptrs.values(), "xnumel"]
        if self.reduction:
            args.append("rnumel")
        args += [s.name for s in syms]
        if self.program_id != PROGRAM_ID:
            args.append(self.program_id)
        args.append("XBLOCK: tl.constexpr")
        if self.reduction:
            args.append("RBLOCK: tl.constexpr")
        prov = ", ".join(self.g.origins())
        head = [
            f"# kernel {self.g.name}: {self.cfg.strategy}; fused FX nodes: {prov}",
            "@triton.jit",
            f"def {self.name}({', '.join(args)}):",
        ]
        if self.indirect is not None:
            head += self.indirect.table_loads(self.ptrs)
        return head
