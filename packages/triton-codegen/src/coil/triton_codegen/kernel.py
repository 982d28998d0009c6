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

import dataclasses
from collections.abc import Mapping

import sympy
import torch
from coil.lowering_ir import Buffer, Expr, Load, loads
from coil.scheduler import ComboGroup, KernelGroup, Member, is_matmul_group
from coil.triton_codegen.combo import generate_combo
from coil.triton_codegen.config import CodegenOptions, KernelConfig, choose
from coil.triton_codegen.frame import Scope, member_loads
from coil.triton_codegen.indirect import IndirectReads
from coil.triton_codegen.kernel_source import KernelSource
from coil.triton_codegen.matmul import generate_matmul
from coil.triton_codegen.prelude import module
from coil.triton_codegen.reductions import ReductionWriter
from coil.triton_codegen.tiling import x_contiguous_loads

__all__ = ["KernelSource", "KernelWriter", "generate", "kernel_config"]


class KernelWriter(ReductionWriter):
    """Writes one kernel's source: the structure of the kernel (which members run where, in
    which loops) over the frame, values, loads, stores and reductions of the classes it builds
    on. Use `generate(group, buffers, target)`."""

    def segments(self) -> tuple[dict[int, int], dict[int, int]]:
        """Loop segment of each r/reduce member, and 'after segment' of each x member."""
        seg: dict[int, int] = {}
        after: dict[int, int] = {}
        for i, m in enumerate(self.g.members):
            deps = [self.g.members.index(self.writer[ld.buffer]) for ld in member_loads(m) if ld.buffer in self.writer]
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
        """The kernel's source (the `def` and its body, no imports) and launch facts."""
        g = self.g
        xs = self.xscope
        self.x_frame(xs)
        if g.members[0].kind == "scan":
            self._scan(g.members[0])
        elif not self.reduction:
            for m in g.members:
                self.store(m, self.compute_member(m, xs), xs)
        elif self.cfg.strategy == "persistent":
            self.persistent_body(xs)
        else:
            self.looped_body(xs)
        return self.finish()

    def x_frame(self, xs: Scope) -> None:
        """Static sizes, `xindex`, `xmask` and the x dims: the start of every kernel's body."""
        idx_t = ".to(tl.int64)" if self.int64 else ""
        for name, size in self.static.items():
            self.emit(xs, f"{name} = {size}")
        pid = self.program_id
        if self.reduction:
            self.emit(xs, f"xindex = ({pid}{idx_t} * XBLOCK + tl.arange(0, XBLOCK)[:, None])")
        else:
            self.emit(xs, f"xindex = {pid}{idx_t} * XBLOCK + tl.arange(0, XBLOCK)")
        self.index_mask(xs, "x")
        self._dims(xs, "x", "xindex", self.g.x_dims)

    def persistent_body(self, xs: Scope) -> None:
        """A persistent reduction: the whole row in one RBLOCK; members in order, each reduction
        finished at once (its per-row value joins the x scope)."""
        g = self.g
        rs = Scope("    ", is_r=True)
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
                self.store(m, out, Scope("    "))
            else:
                scope = rs if m.kind == "r" else Scope("    ", xs.values, xs.members)
                self.store(m, self.compute_member(m, scope), scope)
        self.reread = None

    def looped_body(self, xs: Scope) -> None:
        """A looped or outer reduction: one loop over r per segment (`segments`), the x members
        that depend on a segment's reductions after its loop."""
        g = self.g
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
                                    if m.kind != "x" and seg[i] > s + 1 and i not in self.unread for ld in member_loads(m))
            self._loop(ms)
        self.reread = None

    def finish(self) -> KernelSource:
        """The signature over the body written so far, and the launch facts."""
        g, cfg = self.g, self.cfg
        syms, pointer_args = self.signature_facts((g.xnumel, g.rnumel))
        head = self._header(syms)
        source = "\n".join([*head, *self.lines]) + "\n"
        size_args: tuple[Expr, ...] = ((g.xnumel, g.rnumel) if self.reduction else (g.xnumel,)) + syms
        consts = {"XBLOCK": cfg.xblock}
        if self.reduction:
            consts["RBLOCK"] = cfg.rblock
        grid = sympy.ceiling(g.xnumel / cfg.xblock)
        return KernelSource(
            self.name, source, pointer_args, size_args, consts, grid, cfg.num_warps, cfg.strategy,
            tuple(g.origins()), tuple(g.stores), self.asserts > 0, self.plain_loads, self.reread_rows,
        )

    def reread_scope(self, last: int) -> Scope | None:
        """`generate(..., reread=True)` for a persistent kernel: the scope in which its r members
        after the last reduction (`last`, a member index) are computed, or None when there are
        none that load anything along r.

        The scope starts with no cached values and no r members' results (x members' and
        reductions' come from the x scope, `load`), so those r members load the row again and
        recompute what they need from it, instead of holding the row (and values computed from
        it) in registers across the reductions; the same operations on the same values, so the
        results are the same bits. The buffers they read again get 'evict_last' where they are
        first read (`self.reread`) and 'evict_first' where they are read again. What Inductor's
        layer norm does with its second loop over a row that was read whole in its first."""
        g = self.g
        again = self.memory_reads([m for i, m in enumerate(g.members) if i > last and m.kind == "r"])
        again &= self.memory_reads([m for i, m in enumerate(g.members) if i <= last and m.kind != "x"])
        if last < 0 or not again:
            return None
        self.reread = frozenset(again)
        return Scope("    ", {}, {}, is_r=True)  # x members and reductions: read from xscope.members

    def memory_reads(self, ms: list[Member]) -> set[str]:
        """The buffers in memory that computing `ms` loads (through the r members they read)."""
        out: set[str] = set()
        seen: set[str] = set()
        todo = list(ms)
        while todo:
            for ld in member_loads(todo.pop()):
                w = self.writer.get(ld.buffer)
                if w is None:
                    out.add(ld.buffer)
                elif w.kind == "r" and ld.buffer not in seen:
                    seen.add(ld.buffer)
                    todo.append(w)
        return out

    def prefetch(self, xs: Scope) -> None:
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
            lds = member_loads(m)
            if all(ready(ld) for ld in lds):
                self.compute_member(m, xs)
                early.add(m.op.output.name)
                continue
            for ld in lds:
                if ld.buffer not in self.writer and ready(ld):
                    self.load(ld, m, xs)


def kernel_config(group: KernelGroup, target: str, strategy: str,
                  hints: dict[sympy.Symbol, int] | None = None) -> KernelConfig:
    """`group`'s launch configuration: `choose` at the size hints (2**20 for a size without one),
    with `x_contiguous` from its loads; "auto" over a symbolic row length never picks a
    persistent block."""
    reduction = group.is_reduction
    xn, rn = group.xnumel, group.rnumel
    xh, rh = sympy.sympify(xn).xreplace(hints or {}), sympy.sympify(rn).xreplace(hints or {})
    x_contiguous = reduction and x_contiguous_loads(group)
    if not isinstance(rn, sympy.Integer) and strategy == "auto":
        # a persistent block sized from a hint would be wrong for larger rows
        strategy = "outer" if x_contiguous and target == "cuda" else "looped"
    return choose(
        int(xh) if isinstance(xh, sympy.Integer) else 1 << 20,
        int(rh) if isinstance(rh, sympy.Integer) else 1 << 20,
        reduction, target, strategy, x_contiguous,
    )


def generate(group: KernelGroup, buffers: dict[str, Buffer], target: str, strategy: str = "auto",
             hints: dict[sympy.Symbol, int] | None = None, options: CodegenOptions | None = None,
             *, reread: bool = False, indirect: Mapping[str, tuple[int, torch.dtype]] | None = None,
             table: str | None = None, name: str | None = None) -> KernelSource:
    """Triton source (a whole module) for `group`. target: "cuda" or "interpret".

    Size symbols the kernel needs become integer arguments after xnumel/rnumel (listed in
    `size_args`); `hints` (example values) only pick block sizes. `options` (default: all off)
    adds checks, e.g. bounds asserts on data-dependent accesses (then `KernelSource.debug`).
    `reread`: a persistent reduction kernel reads its rows again after its last reduction
    instead of holding them in registers (`KernelWriter.reread_scope`; the same results, another
    text; an autotuning alternative, `variants.reread_alternative`); no effect on other kernels.
    `indirect` (with `table`): buffers the kernel reads -> (slot, dtype); it loads their
    addresses from the int64 buffer `table`, which it takes in their place, and is named `name`
    (default `<group name>_via<slots>`; indirect.py). ValueError for a buffer it stores to or
    does not read.

    A combo group (coil.scheduler's `ComboGroup`) becomes one kernel calling its parts
    (combo.py), `strategy` that of its reductions; `reread` does not apply to it, and
    `indirect` raises ValueError.
    A matmul group (coil.scheduler's `is_matmul_group`: a matrix product with its pointwise
    epilogue) becomes a GEMM template kernel (matmul.py, `generate_matmul`: its default
    configuration at `hints`); `strategy` and `reread` do not apply to it.
    """
    if isinstance(group, ComboGroup):
        if indirect:
            raise ValueError(f"generate: combo kernel {group.name} reads no input through a table")
        ks = generate_combo(group, buffers, target, strategy, hints, options)
        return dataclasses.replace(ks, source=module(ks.source, target))
    reads = None
    if indirect:
        if table is None:
            raise ValueError("generate: `indirect` needs the `table` the addresses are loaded from")
        reads = IndirectReads(dict(indirect), table, name)
    if is_matmul_group(group):
        return generate_matmul(group, buffers, target, hints, options, reads)
    cfg = kernel_config(group, target, strategy, hints)
    ks = KernelWriter(group, buffers, target, cfg, options, reread, reads).generate()
    return dataclasses.replace(ks, source=module(ks.source, target))
