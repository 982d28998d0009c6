"""Reductions and scans of a kernel: accumulators, their combine and final steps, the loop
over r, online softmax and variance (online.py), and cumulative sums/products.

"""

from __future__ import annotations

import torch
from coil.lowering_ir import Reduction
from coil.scheduler import Member
from coil.triton_codegen.frame import Scope
from coil.triton_codegen.memory import MemoryWriter
from coil.triton_codegen.optable import register_dtype, tl_dtype

IDENTITY = {"sum": "0", "prod": "1", "any": "0", "all": "1"}
BIG_INDEX = "2147483647"


def extreme(dtype: torch.dtype, negative: bool) -> str:
    if dtype.is_floating_point:
        return "float('-inf')" if negative else "float('inf')"
    info = torch.iinfo(dtype)
    return str(info.min if negative else info.max)


def row_has_nan(a: str) -> str:
    """Triton text: whether each row of the [XBLOCK, RBLOCK] tile `a` holds a NaN, as [XBLOCK, 1]."""
    return f"(tl.max(({a} != {a}).to(tl.int8), 1)[:, None] > 0)"


class ReductionWriter(MemoryWriter):
    """Writes a kernel's reductions and scans (module docstring)."""

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
        rs = Scope("        ", is_r=True)
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

    def variance_step(self, v: str, q: str, rs: Scope) -> None:
        """One loop step of an online variance (online.py): this step's values `v` (the partner
        sum's, in float32) update each lane's Welford count `{q}_n`, mean `{q}_mean` and M2 `q`.

        With a static row size that the block divides (a constexpr `if`, as `index_mask`'s),
        every lane takes every step, so each lane's count is the step's number: the mean's
        update multiplies by one reciprocal per step instead of dividing each element by its
        lane's count (an IEEE division is a dozen instructions: the fp32 layer norm's loop is
        faster so, docs/perf.md "Codegen, runtime and lowering choices"). The two differ by rounding only."""
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

    def online_step(self, a: str, v: str, i: int, accs: dict[str, str], rs: Scope) -> None:
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
            rs = Scope("        ", is_r=True)
            self.emit(rs, "rindex = roffset + tl.arange(0, RBLOCK)[None, :]")
        else:
            rs = Scope("    ", is_r=True)
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

    def to_acc(self, v: str, op: Reduction, scope: Scope) -> str:
        want = register_dtype(op.acc_dtype)
        if register_dtype(op.body.dtype) == want:
            return v
        t = self.tmp()
        self.emit(scope, f"{t} = {v}.to({tl_dtype(want)})")
        return t

    def init(self, op: Reduction) -> str:
        if op.reduction_type in ("max", "argmax"):
            return extreme(op.acc_dtype, True)
        if op.reduction_type in ("min", "argmin"):
            return extreme(op.acc_dtype, False)
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
                has_nan = row_has_nan(a)
                return f"tl.where({has_nan}, float('nan'), {ext[rtype]}({a}, 1)[:, None])"
            return f"tl.reduce({a}, 1, _coil_{rtype}_nan)[:, None]"
        return {
            "sum": f"tl.sum({a}, 1)[:, None]", "prod": f"tl.reduce({a}, 1, _coil_mul)[:, None]",
            "max": f"tl.max({a}, 1)[:, None]", "min": f"tl.min({a}, 1)[:, None]",
            "any": f"(tl.max({a}.to(tl.int8), 1) != 0)[:, None]",
            "all": f"(tl.min({a}.to(tl.int8), 1) != 0)[:, None]",
        }[rtype]

    def finish_persistent(self, m: Member, v: str, rs: Scope) -> str:
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
            hit = f"tl.where({row_has_nan(vals)}, {nan}, {hit})"
        return f"{out} = tl.min(tl.where({hit}, {idx}, {BIG_INDEX}), 1)[:, None]"
