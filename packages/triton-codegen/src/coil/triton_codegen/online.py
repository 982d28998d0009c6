"""Online softmax: a row's sum of exp(v - max) accumulated in the same loop as the max.

A looped reduction kernel runs one loop over the row per dependent reduction: softmax's
`m = max(x)`, then `s = sum(exp(x - m))`, then the output `exp(x - m) / s` read the row three
times, cross-entropy's two. When the sum's body is exactly `exp(v - m)` with `m` a float32 max
of the same kernel over `v` itself, `v` computed from the kernel's inputs alone, the sum can run
in the max's loop: each lane keeps its running max `ma` and a sum `sa` scaled to it,

    mn = max(ma, f)                       (f: the max's body at this step; NaN propagates)
    sa = 0                                 where mn == -inf (nothing but -inf seen so far)
         sa * exp(ma - mn) + exp(v - mn)   elsewhere
    ma = mn

and after the loop the row's max `M = max(ma)` and `s = sum(sa * exp(ma - M))`. This is the same
value as the two-pass sum up to rounding, including the rows eager gives NaN (any NaN, a +inf, a
row of -inf: `0 * exp(-inf - -inf)` is NaN again at the end) and rows with leading -inf (their
lanes keep `sa = 0`, which the final scaling keeps 0 for a finite M). `online_pairs` finds the
pairs; `KernelWriter` (kernel.py) puts both in one loop segment and emits the updates above.

Online variance: a layer norm's (or var_mean's) centred sum `sum((v - mean)^2)`, where
`mean = f(s)` is an x member computed from `s = sum(v)` of the same kernel alone (`s / n`), would
need a loop of its own after the sum's. Instead each lane keeps Welford's count `c`, mean `a` and
M2 `q` in the sum's loop,

    c' = c + 1;  d = v - a;  a' = a + d / c';  q' = q + d * (v - a')

and after the loop, with `m = f(S)` computed from the finished sum as the kernel computes it,
`sum((v - m)^2) = sum over lanes of (q + c * (a - m)^2)` (an identity for any m; Chan et al.'s
combination). The value differs from the two-pass sum by rounding only: no sum of squares
minus a squared sum. `online_variances` finds the pairs; they share `OnlineSum` with the softmax
pairs (`kind`). KernelWriter pairs them in loops along contiguous rows only ("looped"), where it
was measured; the "outer" tiling keeps two loops.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from coil.lowering_ir import Load, Op, Reduction, Value, loads
from coil.scheduler import KernelGroup, Member


@dataclass(frozen=True)
class OnlineSum:
    """A sum member that accumulates in its max's loop.

    Attributes:
        max_index: the member whose loop the sum accumulates in (its index in the group): the
            max (`kind` "softmax") or the sum of `v` ("variance").
        value: `v` of exp(v - max) or of (v - mean)^2: the partner's own body, over the sum's
            loop mapping.
        deps: the members the sum no longer waits for (the partner; the fused "r" members its
            body was read through; for a variance the x member computing the mean).
        kind: "softmax" or "variance".
        mean: for a variance, the x member computing the mean from the partner's sum.
    """

    max_index: int
    value: Value
    deps: frozenset[int]
    kind: str = "softmax"
    mean: int = -1


def online_pairs(group: KernelGroup, variances: bool = True) -> dict[int, OnlineSum]:
    """Each sum member of `group` that can accumulate online, by index (the variances of
    `online_variances` too, unless `variances` is false).

    The sum's body is read through the "r" members of the group it loads plainly, with the same
    loop mapping (softmax's x - max and exp(...), kept as members for the division too), and must
    then be `exp(sub(v, load of a max's output))`: nothing around the exp, the max's output
    loaded plainly. Both reductions accumulate in float32, the max comes first, and `v` is the
    max's own body over the same mapping (so every term exp(v - running max) is at most 1: no
    overflow that the final max would have avoided, and a lane's -inf prefix contributes
    exactly what eager's exp(-inf - M) does) loading only buffers this group does not write."""
    writer = {m.op.output.name: i for i, m in enumerate(group.members)}
    out: dict[int, OnlineSum] = {}
    for i, m in _float32_sums(group):
        through: set[int] = set()
        body = _through_r(m.nest.body, group, writer, m, through)
        if not (isinstance(body, Op) and body.name == "exp"):
            continue
        inner = body.args[0]
        if not (isinstance(inner, Op) and inner.name == "sub"):
            continue
        v, sub = inner.args
        if not (isinstance(sub, Load) and _plain(sub) and sub.buffer in writer):
            continue
        j = writer[sub.buffer]
        a = group.members[j]
        if not (j < i and _float32_max(a) and sub.dtype == torch.float32 and a.mapping == m.mapping):
            continue
        if v != a.nest.body or any(ld.buffer in writer for ld in loads(v)):
            continue
        out[i] = OnlineSum(j, v, frozenset(through | {j}))
    taken = {o.max_index for o in out.values()}
    for i, o in (online_variances(group) if variances else {}).items():
        if i not in out and o.max_index not in taken:  # one online sum per partner
            out[i] = o
            taken.add(o.max_index)
    return out


def online_variances(group: KernelGroup) -> dict[int, OnlineSum]:
    """Each sum member of `group` of the form sum((v - mean) * (v - mean)), by index, where
    `mean` is a plain load of an x member whose body reads nothing but plain loads of a sum
    member's output over `v` itself (same loop mapping, float32 accumulation both, the sum
    first); `v` loads no buffer this group writes."""
    writer = {m.op.output.name: i for i, m in enumerate(group.members)}
    out: dict[int, OnlineSum] = {}
    for i, m in _float32_sums(group):
        body = m.nest.body
        if not (isinstance(body, Op) and body.name == "mul"):
            continue
        d, e = body.args
        if d != e or not (isinstance(d, Op) and d.name == "sub"):
            continue
        v, mean = d.args
        if not (isinstance(mean, Load) and _plain(mean) and mean.buffer in writer):
            continue
        k = writer[mean.buffer]
        mm = group.members[k]
        sums = {ld.buffer for ld in loads(mm.nest.body)}
        if mm.kind != "x" or len(sums) != 1 or not all(_plain(ld) for ld in loads(mm.nest.body)):
            continue
        j = writer.get(next(iter(sums)), -1)
        a = group.members[j] if j >= 0 else None
        if a is None or not (j < i and _float32_sum(a) and a.mapping == m.mapping and a.nest.body == v):
            continue
        if any(ld.buffer in writer for ld in loads(v)):
            continue
        out[i] = OnlineSum(j, v, frozenset({j, k}), "variance", k)
    return out


def _through_r(v: Value, group: KernelGroup, writer: dict[str, int], m: Member, through: set[int],
               depth: int = 0) -> Value:
    """`v` with each plain load of a fused "r" member's buffer (same loop mapping as `m`) replaced
    by that member's body, recursively (the members read are added to `through`); loads of
    anything else, and values deeper than 8 members, are left as they are."""
    if isinstance(v, Load):
        k = writer.get(v.buffer)
        if k is None or not _plain(v) or depth >= 8:
            return v
        r = group.members[k]
        if r.kind != "r" or r.mapping != m.mapping or r.nest.body.dtype != v.dtype:
            return v
        through.add(k)
        return _through_r(r.nest.body, group, writer, m, through, depth + 1)
    if isinstance(v, Op) and v.name in ("exp", "sub"):  # the only nodes the pattern walks through
        return Op(v.name, tuple(_through_r(x, group, writer, m, through, depth) for x in v.args), v.dtype)
    return v


def unread_after(group: KernelGroup, pairs: dict[int, OnlineSum]) -> frozenset[int]:
    """The fused "r" members no one needs once `pairs` accumulate online: neither stored nor read
    by anything but those sums (that now read through them) and other such members. Their
    loop would compute values nothing uses (cross-entropy's exp(x - max))."""
    readers: dict[str, set[int]] = {}
    for k, m in enumerate(group.members):
        for ld in loads(m.nest.body):
            readers.setdefault(ld.buffer, set()).add(k)
    skipped = {(k, d) for k, o in pairs.items() for d in o.deps}
    dead: set[int] = set()
    changed = True
    while changed:
        changed = False
        for d in {d for o in pairs.values() for d in o.deps} - dead:
            m = group.members[d]
            name = m.op.output.name
            if m.kind != "r" or name in group.stores:
                continue
            if all((k, d) in skipped or k in dead for k in readers.get(name, ())):
                dead.add(d)
                changed = True
    return frozenset(dead)


def _plain(ld: Load) -> bool:
    return ld.mask is None and not ld.indirect


def _float32_sums(group: KernelGroup) -> list[tuple[int, Member]]:
    """The group's sum members accumulating in float32, with their indices."""
    return [(i, m) for i, m in enumerate(group.members) if _float32_sum(m)]


def _float32_sum(m: Member) -> bool:
    op = m.op
    return m.kind == "reduce" and isinstance(op, Reduction) and op.reduction_type == "sum" and op.acc_dtype == torch.float32


def _float32_max(m: Member) -> bool:
    op = m.op
    return m.kind == "reduce" and isinstance(op, Reduction) and op.reduction_type == "max" and op.acc_dtype == torch.float32
