"""Loads and stores of a kernel: masks, L2 eviction hints, scattered stores and the bounds
asserts of data-dependent accesses (`CodegenOptions.debug_asserts`).

A load of a buffer the kernel itself writes reads the member's registers instead of memory (an
"r" member of an earlier loop is recomputed in the current one); any other load becomes one
`tl.load` per (buffer, index, mask) in a scope. A store writes a member's value where the group
stores its buffer; a Scatter's member stores, or adds atomically, at an index computed from
loaded indices.
"""

from __future__ import annotations

import sympy
import torch
from coil.lowering_ir import Expr, IndexValue, Load, Op, Scatter, Value
from coil.scheduler import Member
from coil.triton_codegen.casts import to_storage
from coil.triton_codegen.frame import KERNEL_VAR, Scope, has_loop_var
from coil.triton_codegen.values import ValueWriter


class MemoryWriter(ValueWriter):
    """Writes a kernel's loads and stores (module docstring)."""

    def load(self, ld: Load, m: Member, scope: Scope) -> str:
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
            # an r-invariant load of a reduction over an empty range: the tensor may be empty (a
            # sum over a 0-size dim of an expanded input would read its element 0)
            mask = "xmask & (xindex * 0 < rnumel)"
        if mask_var is not None:
            mask = f"{mask} & {mask_var}"
        self.check_bounds("load", ld.buffer, index, list(bound.values()), mask, scope)
        cast = ".to(tl.float32)" if ld.dtype in (torch.float16, torch.bfloat16) else ""
        where = self.ix(index) if has_loop_var(index) else f"{self.ix(index)} + xindex * 0"
        hint = self.eviction(ld.buffer, index, uses_r, scope)
        self.emit(scope, f"{t} = tl.load({self.ptr(ld.buffer)} + {where}, {mask}, other=0{hint}){cast}")
        scope.values[key] = t
        return t

    def eviction(self, buf: str, index: Expr, uses_r: bool, scope: Scope) -> str:
        """The L2 eviction hint of a load inside a reduction's r scope (empty elsewhere).

        A load whose index has no x variable reads the same elements for every row (a norm's
        weight): keep it ('evict_last'). In a loop over r, a buffer a later loop of this kernel
        reads again (a norm's input, read for the statistics and again to normalise) is kept
        too, and one read for the last time streams through ('evict_first'), so it does not push
        the kept ones out. A persistent block reads each element once: no hint."""
        if not (self.reduction and scope.is_r and uses_r):
            return ""
        if not self.one_row and not any(s.name.startswith("x") and KERNEL_VAR.match(s.name) for s in index.free_symbols):
            return ", eviction_policy='evict_last'"
        if self.reread is None:
            return ""
        return ", eviction_policy='evict_last'" if buf in self.reread else ", eviction_policy='evict_first'"

    def store(self, m: Member, var: str, scope: Scope) -> None:
        name = m.op.output.name
        if name not in self.g.stores:
            return
        if isinstance(m.op, Scatter):
            self.scatter_store(m, var, scope)
            return
        e = m.kernel_expr(m.nest.store_index)
        idx = self.ix(e) if has_loop_var(e) else f"{self.ix(e)} + {self.zero(scope)}"
        dt = self.buffers[name].layout.dtype
        # broadcast by subtracting a zero: x - 0 keeps the sign of -0.0 (x + 0 would make it +0.0).
        # Not for a pointwise kernel's value read from memory or computed from the index: it has
        # the block's shape already, and the subtraction costs time in memory-bound kernels
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

    def scatter_store(self, m: Member, var: str, scope: Scope) -> None:
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
                     scope: Scope) -> None:
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
            if coeff == 0 or has_loop_var(coeff):
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
