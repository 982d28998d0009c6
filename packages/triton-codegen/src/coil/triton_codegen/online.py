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
pairs; `KernelWriter` puts both in one loop segment (kernel.py's `segments`) and emits the
updates above (reductions.py).

Online variance: a layer norm's (or var_mean's) centred sum `sum((v - mean)^2)`, where
`mean = f(s)` is an x member computed from `s = sum(v)` of the same kernel alone (`s / n`), would
need a loop of its own after the sum's. Instead each lane keeps Welford's count `c`, mean `a` and
M2 `q` in the sum's loop,

    c' = c + 1;  d = v - a;  a' = a + d / c';  q' = q + d * (v - a')

and after the loop, with `m = f(S)` computed from the finished sum as the kernel computes it,
`sum((v - m)^2) = sum over lanes of (q + c * (a - m)^2)` (an identity for any m; Chan et al.'s
combination). The value differs from the two-pass sum by rounding only: no sum of squares
minus a squared sum. `online_variances` finds the pairs; they share `OnlineSum` with the softmax
pairs (`kind`). KernelWriter pairs them in loops along contiguous rows ("looped") and in the
"outer" tiling (batch-norm statistics); when the block divides a static row every lane takes
every step, and `a' = a + d * (1 / step)` with one reciprocal per step (KernelWriter.variance_step).
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


def online_pairs(group: KernelGroup) -> dict[int, OnlineSum]:
    """Each sum member of `group` that can accumulate online, by index (the variances of
    `online_variances` too).

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
        j = _member_read(sub, writer)
        if j is None:
            continue
        a = group.members[j]
        if not (j < i and _float32(a, "max") and sub.dtype == torch.float32 and a.mapping == m.mapping):
            continue
        if v != a.nest.body or _reads_group(v, writer):
            continue
        out[i] = OnlineSum(j, v, frozenset(through | {j}))
    taken = {o.max_index for o in out.values()}
    for i, o in online_variances(group).items():
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
        k = _member_read(mean, writer)
        if k is None or group.members[k].kind != "x":
            continue
        read = {_member_read(ld, writer) for ld in loads(group.members[k].nest.body)}
        j = read.pop() if len(read) == 1 else None  # one member, every load plain
        if j is None:
            continue
        a = group.members[j]
        if not (j < i and _float32(a, "sum") and a.mapping == m.mapping and a.nest.body == v):
            continue
        if _reads_group(v, writer):
            continue
        out[i] = OnlineSum(j, v, frozenset({j, k}), "variance", k)
    return out


def _through_r(v: Value, group: KernelGroup, writer: dict[str, int], m: Member, through: set[int],
               depth: int = 0) -> Value:
    """`v` with each plain load of a fused "r" member's buffer (same loop mapping as `m`) replaced
    by that member's body, recursively (the members read are added to `through`); loads of
    anything else, and values deeper than 8 members, are left as they are."""
    if isinstance(v, Load):
        k = _member_read(v, writer)
        if k is None or depth >= 8:
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


def _member_read(v: Value, writer: dict[str, int]) -> int | None:
    """The index of the group member whose output `v` is a plain load of, else None."""
    return writer.get(v.buffer) if isinstance(v, Load) and _plain(v) else None


def _reads_group(v: Value, writer: dict[str, int]) -> bool:
    """Whether `v` loads a buffer the group writes."""
    return any(ld.buffer in writer for ld in loads(v))


def _float32_sums(group: KernelGroup) -> list[tuple[int, Member]]:
    """The group's sum members accumulating in float32, with their indices."""
    return [(i, m) for i, m in enumerate(group.members) if _float32(m, "sum")]


def _float32(m: Member, reduction_type: str) -> bool:
    """Whether `m` is a `reduction_type` reduction accumulating in float32."""
    op = m.op
    return (m.kind == "reduce" and isinstance(op, Reduction) and op.reduction_type == reduction_type
            and op.acc_dtype == torch.float32)
