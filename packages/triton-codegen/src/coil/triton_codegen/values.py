"""Values of a kernel's members: expression DAGs of ops, constants and index values, each
computed once per scope (a CSE cache per code region, `Scope.values`).

`value(v, m, scope)` gives the variable holding `v` of member `m` in `scope`, emitting the lines
that compute it; loads are memory.py's (`load`), which builds on this class.
"""

from __future__ import annotations

import torch
from coil.lowering_ir import Constant, IndexValue, Load, Op, Value
from coil.scheduler import Member
from coil.triton_codegen.casts import HALF, round_to_half
from coil.triton_codegen.frame import KernelFrame, Scope
from coil.triton_codegen.optable import register_dtype, same_width_int, template, tl_dtype


class ValueWriter(KernelFrame):
    """Writes the values of members (module docstring)."""

    def value(self, v: Value, m: Member, scope: Scope) -> str:
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

    def constant(self, c: Constant, scope: Scope) -> str:
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

    def compute_member(self, m: Member, scope: Scope) -> str:
        v = self.value(m.nest.body, m, scope)
        scope.members[m.op.output.name] = v
        return v

    def load(self, ld: Load, m: Member, scope: Scope) -> str:
        """A variable holding the value `ld` reads (memory.py's `MemoryWriter.load`)."""
        raise NotImplementedError
