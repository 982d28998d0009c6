"""Greedy fusion of Pointwise/Reduction operations into kernel groups.

Candidates are pairs of groups that share a buffer: producer -> consumer (vertical) or two
readers of the same buffer (horizontal; not through a buffer of at most `HORIZONTAL_MIN_BYTES`
an operation writes, such as an RNG seed; each reader with its `HORIZONTAL_PARTNERS` nearest
readers either side). Each is scored by the bytes fusion saves (a buffer that need not be
written and read back; an input read once instead of twice) and tried best first;
then pairs that share no buffer but read outputs of one group over as many elements (siblings:
split reductions' finishing sums, padded copies), and groups of single-element pointwise ops
(scalars: a batch norm's step counter in every layer), which save a launch alone.
A fusion is taken when `group.plan` accepts the merged group (same iteration space, reads at the
written index), it makes no cycle among the remaining groups and the group stays within
`FUSION_MAX_OPS` operations. Every decision, taken or not, is recorded with its reason in
`FusionLog`. A fusion that would raise the peak of live bytes (the planner's model over the
operation order: `peak_bound.LiveProfile`) above the unfused peak is refused (`peak_slack`).

Loop orders: each op's loops start in the memory order of what it writes (`canonicalize`). When
the merged group does not plan with the orders its two halves already use, three other orders
are tried (`_order_candidates`), each only when it changes some member's nest:
  1. every pointwise member that reads the shared buffer runs in the memory order of that read
     (e.g. a consumer reading a channels-last buffer and writing a contiguous one: it then runs
     in the producer's order and the value stays in registers; its own store is strided);
  2. every member in its logical order (ops whose logical nests line up, e.g. a channels-last
     producer of a reduction over trailing logical dims);
  3. every pointwise member that accesses a buffer a reduction member reads runs in the order
     that reduction visits it (`visit_order`: softmax over an outer dim, whose exp(x - max) and
     division otherwise run in their own memory order, unlike the reductions' x-then-r order).
`plan` checks legality for each candidate from the index expressions, as for the default.
"""

from __future__ import annotations

import heapq
import itertools
import re
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import sympy
from coil.lowering_ir import ExternKernel, Operation, Pointwise, Reduction, loads
from coil.lowering_ir.nodes import SCAN_TYPES, Scatter, used_symbols
from coil.scheduler.canonical import LoopOrder, loop_permutation
from coil.scheduler.combo import (
    COMBO_MAX_EARLY_BYTES,
    COMBO_MAX_PARTS,
    COMBO_MAX_REDUCED,
    ComboGroup,
    combine,
    name_parts,
)
from coil.scheduler.group import FusionIllegal, KernelGroup, plan
from coil.scheduler.merge_dag import MergeDag
from coil.scheduler.peak_bound import TOLERATED_BYTES, LiveProfile
from coil.scheduler.visit_order import visit_orders

# Two readers of a buffer this small are not fused for its sake (horizontal fusion): reading it
# twice costs nothing, and every dropout mask of a training graph reads the same 8-byte RNG seed:
# fused for it, all the masks of a model gather into one kernel of dozens of Philox generators
# that takes Triton many times a normal kernel's time to compile (docs/perf.md, "Codegen,
# runtime and lowering choices"); unfused, each mask joins its consumer.
HORIZONTAL_MIN_BYTES = 64
# A reduction's per-row epilogue (a pointwise op over its output elements, or a reduction of the
# same rows) is tried before the other fusions of its buffers, at this multiple of the bytes it
# saves: fused there, it reads the row's values from registers and leaves one value per row,
# where fused into a consumer that reduces over the rows it re-reads every per-row output of the
# reduction (and any scattered load it makes, such as a loss's target logit, runs in one program
# instead of one per row; in the row kernel, triton-codegen's prefetch issues that load early).
EPILOGUE_WEIGHT = 4
# Readers of a buffer paired for horizontal fusion: each with this many readers either side of it
# in operation order. A buffer read by hundreds of operations (the steps of an unrolled
# recurrence each slicing one input) would otherwise give a quadratic number of pairs; merged
# pair by pair, neighbours still chain into one group.
HORIZONTAL_PARTNERS = 8
# Operations in one fused group at most: planning a merge walks the whole group, so a chain of
# thousands (an unrolled recurrence) fused end to end costs time quadratic in its length. Far
# above what a layer of a model fuses into one kernel.
FUSION_MAX_OPS = 256
# Readers of one group's outputs paired as siblings (`_Fusion.siblings`): a kernel whose outputs
# feed many others would otherwise give a quadratic number of pairs to try.
SIBLINGS_PER_GROUP = 16
SIBLING_MAX_OPS = 8  # operations in a group that siblings' fusion makes
# Groups of single-element pointwise operations, independent of each other (a batch norm's
# step counter, `num_batches_tracked + 1`, once per layer), gathered into one kernel of at most
# this many operations (`_Fusion.scalars`): each alone is a launch for one element.
SCALAR_MAX_OPS = 32


@dataclass
class FusionLog:
    """Why groups were or were not fused: (first, second, taken, reason) per attempt."""

    attempts: list[tuple[str, str, bool, str]] = field(default_factory=list)


def _nbytes(op: Operation, name: str) -> int:
    for b in op.outputs:
        if b.name == name:
            e = b.nbytes_expr
            return int(e) if isinstance(e, sympy.Integer) else 1 << 20
    return 0


def _empty(op: Operation) -> bool:
    """An operation over zero elements: nothing to gain from fusing it (and no loops to map)."""
    return any(b.layout.numel == 0 for b in op.outputs)


def _epilogue(writer: Operation, reader: Operation) -> bool:
    """`reader` runs over exactly the output elements of the reduction `writer`: a pointwise op
    there is a per-row epilogue of it, a reduction there reduces the same rows again (softmax's
    sum after its max). Either can run in the reduction's kernel, one program per row."""
    return (isinstance(writer, Reduction) and not _is_scan(writer) and isinstance(reader, Pointwise | Reduction)
            and not _is_scan(reader) and sympy.Mul(*reader.ranges) == sympy.Mul(*writer.ranges))


def _static(op: Pointwise | Reduction) -> bool:
    """Whether `op` uses no size symbol (only its loop variables p0.. and r0.., Pointwise's and
    Reduction's docstrings), memoised per op (a walk of its whole body)."""
    known = _STATIC.get(op)
    if known is None:
        loops = {f"p{i}" for i in range(len(op.ranges))}
        if isinstance(op, Reduction):
            loops |= {f"r{i}" for i in range(len(op.reduction_ranges))}
        known = _STATIC[op] = {s.name for s in used_symbols(op)} <= loops
    return known


_STATIC: weakref.WeakKeyDictionary[Pointwise | Reduction, bool] = weakref.WeakKeyDictionary()


def _is_scan(op: Operation) -> bool:
    """Scans run in kernels of their own (their running carry does not mix with other loops)."""
    return isinstance(op, Reduction) and op.reduction_type in SCAN_TYPES


def _first_read(op: Pointwise, buffer: str) -> sympy.Expr | None:
    """The index of `op`'s first load of `buffer` (None if it reads none), memoised per op."""
    memo = _READS.get(op)
    if memo is None:
        memo = _READS[op] = {}
        for ld in loads(op.body):
            memo.setdefault(ld.buffer, ld.index)
    return memo.get(buffer)


_READS: weakref.WeakKeyDictionary[Pointwise, dict[str, sympy.Expr]] = weakref.WeakKeyDictionary()


def _order_candidates(merged: Sequence[Pointwise | Reduction], base: dict[int, LoopOrder], shared: str,
                      shared_writer: Operation | None, visit: bool = True) -> Iterator[dict[int, LoopOrder]]:
    """The loop orders to try for a merged group, in turn (see the module docstring): `base`,
    then pointwise readers of `shared` in the order of that read, then all logical, then
    pointwise members in the order a reduction member visits what they access; an alternative
    is given only when it puts some member's loops in a permutation no earlier candidate gave
    (loop permutations are memoised and cheap; nests are built only by `plan`), and computed
    only when the earlier ones did not plan."""
    def key(orders: dict[int, LoopOrder]) -> tuple[tuple[int, ...], ...]:
        return tuple(loop_permutation(o, orders[id(o)]) for o in merged)

    def read() -> dict[int, LoopOrder]:
        out = dict(base)
        for o in merged:
            if isinstance(o, Pointwise) and o is not shared_writer:
                idx = _first_read(o, shared)
                if idx is not None:
                    out[id(o)] = idx
        return out

    def logical() -> dict[int, LoopOrder]:
        return {id(o): "logical" for o in merged}

    def visiting() -> dict[int, LoopOrder] | None:
        return visit_orders(merged, base)

    makers: list[Callable[[], dict[int, LoopOrder] | None]] = [read, logical]
    if visit:
        makers.append(visiting)
    yield base
    seen = {key(base)}
    for make in makers:
        alt = make()
        if alt is None:
            continue
        k = key(alt)
        if k not in seen:
            seen.add(k)
            yield alt


def fuse(operations: Sequence[Operation], graph_outputs: set[str], enabled: bool = True,
         log: FusionLog | None = None, peak_slack: float | None = 0.0, visit_order: bool = True
         ) -> list[KernelGroup | ExternKernel | Scatter]:
    """Partition `operations` into kernel groups and externs, in a valid execution order.

    `visit_order`: whether the third alternative loop order (pointwise members ordered as a
    reduction member visits memory, `visit_order.py`) is tried (coil.backend's knob
    COIL_FUSION_VISIT_ORDER).

    With `peak_slack` (not None) a fusion is taken only when the peak of live bytes it leaves
    (`peak_bound.LiveProfile`, the planner's model over the operation order) is at most the
    unfused peak times (1 + peak_slack), plus `peak_bound.TOLERATED_BYTES`: fusion never raises
    the peak past that bound. None: no bound."""
    fusion = _Fusion(operations, graph_outputs, log, peak_slack if enabled else None, visit_order)
    if enabled:
        fusion.merge_greedily()
        fusion.combine_launches()
    return fusion.steps(fusion.execution_order())


class _Fusion:
    """The state of one `fuse`: the groups of operations (one per op to start with), their
    dependency DAG, the plans of merged groups and the live-bytes profile; its methods are the
    steps of `fuse`."""

    def __init__(self, operations: Sequence[Operation], graph_outputs: set[str], log: FusionLog | None,
                 peak_slack: float | None, visit_order: bool) -> None:
        self.ops = ops = list(operations)
        self.graph_outputs = graph_outputs
        self.log = log
        self.peak_slack = peak_slack
        self.visit_order = visit_order
        self.pos = {id(op): i for i, op in enumerate(ops)}
        self.writer = {b.name: op for op in ops for b in op.outputs}
        self.readers: dict[str, list[Operation]] = {}
        for op in ops:
            for r in op.reads():
                self.readers.setdefault(r, []).append(op)
        # (buffer, op id) -> the op's index among the buffer's readers (operation order), for the
        # buffers whose readers `partners` windows
        self.reader_index = {(r, id(op)): i for r, rs in self.readers.items()
                             if len(rs) > 2 * HORIZONTAL_PARTNERS + 1 for i, op in enumerate(rs)}
        # group id per op; groups as lists of ops
        self.gid: dict[int, int] = {}
        self.groups: dict[int, list[Operation]] = {}
        for i, op in enumerate(ops):
            self.gid[id(op)] = i
            self.groups[i] = [op]
        self.op_reads = {id(op): op.reads() for op in ops}
        # the extern defining each unbacked symbol (a data-dependent size): its users run after it
        self.definer = {sym: op for op in ops if isinstance(op, ExternKernel) for sym in op.defined_symbols()}
        # sympy sizes are slow to evaluate: each op's emptiness and output bytes, once per op
        self.empty = {id(op): _empty(op) for op in ops}
        self.nbytes_memo: dict[tuple[int, str], int] = {}
        self.epilogue_memo: dict[tuple[int, int], bool] = {}
        self.numel_memo: dict[int, sympy.Expr] = {}
        # the cycle check before a merge: `merge_dag` (a topological order of the groups bounds the search)
        self.dag = MergeDag({g: self.compute_preds(g) for g in self.groups})
        self.profile = LiveProfile(ops, graph_outputs, self.nbytes) if peak_slack is not None else None
        self.plans: dict[int, KernelGroup] = {}
        self.order_of: dict[int, LoopOrder] = {}  # op id -> the loop order of its group's plan (default "store")
        # (members, shared buffer, name) -> why they did not plan. Groups only grow, so the same
        # members again are the same two groups, unchanged, with the same loop orders: the same
        # refusal (merge_greedily's later passes try every refused pair again). The reason, not the
        # error: an error's traceback holds every frame up to the user's, and what they held
        self.illegal: dict[tuple[frozenset[int], str, str], str] = {}

    def nbytes(self, op: Operation, name: str) -> int:
        key = (id(op), name)
        got = self.nbytes_memo.get(key)
        if got is None:
            got = self.nbytes_memo[key] = _nbytes(op, name)
        return got

    def compute_preds(self, g: int) -> set[int]:
        """The groups group `g` depends on: writers of what it reads, the externs defining the
        unbacked symbols it uses, and, for an extern that mutates a buffer, the earlier readers
        of that buffer."""
        out: set[int] = set()
        for op in self.groups[g]:
            if self.definer:
                for sym in used_symbols(op) & self.definer.keys():
                    d = self.definer[sym]
                    if d is not op and self.gid[id(d)] != g:
                        out.add(self.gid[id(d)])
            for r in self.op_reads[id(op)]:
                w = self.writer.get(r)
                if w is not None and self.gid[id(w)] != g:
                    out.add(self.gid[id(w)])
            if isinstance(op, ExternKernel):
                for m in op.mutates:
                    for rd in self.readers.get(m, []):
                        if self.pos[id(rd)] < self.pos[id(op)] and self.gid[id(rd)] != g:
                            out.add(self.gid[id(rd)])
        return out

    def outside_readers(self, members: list[Operation]) -> set[str]:
        """The buffers `members` write that an operation outside them reads."""
        ids = {id(m) for m in members}
        out: set[str] = set()
        for m in members:
            for b in m.outputs:
                if any(id(r) not in ids for r in self.readers.get(b.name, [])):
                    out.add(b.name)
        return out

    def try_plan(self, names: str, merged: list[Operation], shared: str) -> KernelGroup:
        """Plan `merged` with the first loop orders that work (`_order_candidates`)."""
        pw = [o for o in merged if isinstance(o, Pointwise | Reduction)]
        base: dict[int, LoopOrder] = {id(o): self.order_of.get(id(o), "store") for o in pw}
        first = ""  # the first refusal's reason; the error itself, held here, is a cycle through this frame
        for orders in _order_candidates(pw, base, shared, self.writer.get(shared), self.visit_order):
            try:
                return plan(names, pw, self.outside_readers(merged), self.graph_outputs, orders)
            except FusionIllegal as e:
                first = first or str(e)
        assert first
        raise FusionIllegal(first)

    def fusible(self, op: Operation) -> bool:
        return isinstance(op, Pointwise | Reduction) and not _is_scan(op) and not self.empty[id(op)]

    def candidates(self) -> list[tuple[int, Operation, Operation, str]]:
        """(bytes saved, first op, second op, shared buffer) of every pair of ops in different
        groups that share a buffer, best first: producer -> consumer (an epilogue weighted by
        EPILOGUE_WEIGHT), and two readers of a buffer of more than HORIZONTAL_MIN_BYTES; last,
        the launch-only pairs (`siblings`, then `scalars`)."""
        cands = self.sharing()
        cands.sort(key=lambda c: -c[0])
        return cands + self.siblings() + self.scalars()

    def small_enough(self, first_op: Operation, second_op: Operation, shared: str) -> bool:
        """Whether the groups of a launch-only pair are small enough together: siblings at most
        SIBLING_MAX_OPS operations (they merge pair by pair, and a kernel gathering every reader
        of a group's outputs would take Triton long to compile for one launch saved per pair);
        scalars (no shared buffer) at most SCALAR_MAX_OPS, every one over a single element."""
        a, b = self.groups[self.gid[id(first_op)]], self.groups[self.gid[id(second_op)]]
        if shared:
            return len(a) + len(b) <= SIBLING_MAX_OPS
        return len(a) + len(b) <= SCALAR_MAX_OPS and all(self.scalar(o) for o in a + b)

    def scalar(self, op: Operation) -> bool:
        """Whether `op` is a fusible pointwise op over a single element."""
        return isinstance(op, Pointwise) and self.fusible(op) and self.numel(op) == 1

    def scalars(self) -> list[tuple[int, Operation, Operation, str]]:
        """Consecutive single-element pointwise ops (in operation order) in different groups, as
        launch-only pairs (score 0, no shared buffer, tried last): merged, a run of them is one
        launch; `small_enough` keeps such groups to scalars alone, the cycle check to
        independent ones."""
        ops = [op for op in self.ops if self.scalar(op)]
        return [(0, a, b, "") for a, b in itertools.pairwise(ops) if self.gid[id(a)] != self.gid[id(b)]]

    def siblings(self) -> list[tuple[int, Operation, Operation, str]]:
        """Pairs of ops in different groups that read outputs (of more than HORIZONTAL_MIN_BYTES)
        of one group and run over as many elements: the finishing sums of split reductions whose
        partials one kernel wrote (a layer norm's weight and bias gradients), the padded copies
        of tensors one kernel split (an attention's keys and values). Fused, they save a launch,
        not bytes (score 0, tried after every pair that saves bytes); `plan` decides whether
        they can share a kernel. Among the first SIBLINGS_PER_GROUP readers of a group, in
        operation order; the shared buffer named is the second op's read of that group."""
        by_producer: dict[int, list[tuple[Operation, str]]] = {}
        for op in self.ops:
            if not self.fusible(op):
                continue
            reads: dict[int, str] = {}
            for r in self.op_reads[id(op)]:
                w = self.writer.get(r)
                if w is not None and self.fusible(w) and self.nbytes(w, r) > HORIZONTAL_MIN_BYTES:  # not a seed
                    reads.setdefault(self.gid[id(w)], r)
            for g, r in reads.items():
                if g != self.gid[id(op)]:
                    by_producer.setdefault(g, []).append((op, r))
        pairs: list[tuple[int, Operation, Operation, str]] = []
        seen: set[tuple[int, int]] = set()
        for readers in by_producer.values():
            readers = readers[:SIBLINGS_PER_GROUP]
            for i, (first, _) in enumerate(readers):
                for second, read in readers[i + 1:]:
                    a, b = sorted((self.gid[id(first)], self.gid[id(second)]))
                    if a == b or (a, b) in seen or self.numel(first) != self.numel(second):
                        continue
                    seen.add((a, b))
                    pairs.append((0, first, second, read))
        return pairs

    def numel(self, op: Operation) -> sympy.Expr:
        """The elements `op` (fusible) runs over (its loop ranges' product; a reduction's reduced
        ones too)."""
        got = self.numel_memo.get(id(op))
        if got is None:
            assert isinstance(op, Pointwise | Reduction)
            ranges = list(op.ranges) + (list(op.reduction_ranges) if isinstance(op, Reduction) else [])
            got = self.numel_memo[id(op)] = sympy.Mul(*ranges)
        return got

    def sharing(self) -> list[tuple[int, Operation, Operation, str]]:
        """The pairs that share a buffer (`candidates`), unsorted."""
        cands: list[tuple[int, Operation, Operation, str]] = []
        for op in self.ops:
            if not self.fusible(op):
                continue
            for r in self.op_reads[id(op)]:
                w = self.writer.get(r)
                if w is not None and self.fusible(w) and self.gid[id(w)] != self.gid[id(op)]:
                    ek = (id(w), id(op))
                    if ek not in self.epilogue_memo:
                        self.epilogue_memo[ek] = _epilogue(w, op)
                    weight = EPILOGUE_WEIGHT if self.epilogue_memo[ek] else 1
                    cands.append((2 * self.nbytes(w, r) * weight, w, op, r))
                if r in self.writer and self.nbytes(self.writer[r], r) <= HORIZONTAL_MIN_BYTES:
                    continue  # sharing a scalar (an RNG seed) saves nothing: no horizontal fusion
                for other in self.partners(op, r):
                    if other is not op and self.fusible(other) and self.gid[id(other)] != self.gid[id(op)]:
                        cands.append((self.nbytes(self.writer[r], r) if r in self.writer else 1, other, op, r))
        return cands

    def partners(self, op: Operation, r: str) -> list[Operation]:
        """The readers of `r` paired with its reader `op` for horizontal fusion: all of them, or
        the HORIZONTAL_PARTNERS either side of `op` in operation order when there are more."""
        rs = self.readers.get(r, [])
        if len(rs) <= 2 * HORIZONTAL_PARTNERS + 1:
            return rs
        i = self.reader_index[(r, id(op))]
        return rs[max(0, i - HORIZONTAL_PARTNERS):i + HORIZONTAL_PARTNERS + 1]

    def record(self, a: int, b: int, taken: bool, reason: str) -> None:
        if self.log is not None:
            self.log.attempts.append((self.groups[a][0].name, self.groups[b][0].name, taken, reason))

    def attempt(self, first_op: Operation, second_op: Operation, shared: str) -> bool:
        """Merge the groups the two ops are in now (earlier fusions of this pass included) when
        that makes no cycle, keeps the peak of live bytes within the bound and plans; whether it did."""
        a, b = self.gid[id(first_op)], self.gid[id(second_op)]
        if a == b:
            return False
        if len(self.groups[a]) + len(self.groups[b]) > FUSION_MAX_OPS:
            self.record(a, b, False, f"would make a group of more than {FUSION_MAX_OPS} operations")
            return False
        merged = sorted(self.groups[a] + self.groups[b], key=lambda o: self.pos[id(o)])
        names = f"{self.groups[a][0].name}+{self.groups[b][0].name}"
        if self.dag.creates_cycle(a, b):
            self.record(a, b, False, "would create a cycle through another kernel")
            return False
        if self.raises_peak(a, b, ""):
            return False
        key = (frozenset(id(o) for o in merged), shared, names)
        refused = self.illegal.get(key)
        if refused is None:
            try:
                p = self.try_plan(names, merged, shared)
            except FusionIllegal as e:
                refused = self.illegal[key] = str(e)
        if refused is not None:
            self.record(a, b, False, refused)
            return False
        self.record(a, b, True, "fused")
        self.merge(a, b, p)
        self.order_of.update({id(m.op): m.order for m in p.members})
        return True

    def raises_peak(self, a: int, b: int, what: str, late: bool = False) -> bool:
        """Whether merging groups `a` and `b` (at the later one's position with `late`:
        `LiveProfile.peak_if_merged`) would raise the peak of live bytes past the bound (`fuse`);
        if so, the refusal is recorded (its reason prefixed by `what`)."""
        if self.profile is None:
            return False
        bound = self.profile.unfused_peak * (1.0 + (self.peak_slack or 0.0))
        after = self.profile.peak_if_merged(self.groups[a], self.groups[b], late)
        if after <= bound + TOLERATED_BYTES:
            return False
        self.record(a, b, False, f"{what}would raise the peak of live bytes to {after} (bound {int(bound)}, "
                                 f"the unfused peak)")
        return True

    def merge(self, a: int, b: int, p: KernelGroup, late: bool = False) -> None:
        """Merge groups `a` and `b` into one, planned as `p` (the live-bytes profile, at the
        later one's position with `late`, the DAG, the groups and their plans)."""
        if self.profile is not None:
            self.profile.merge(self.groups[a], self.groups[b], late)
        keep, drop = min(a, b), max(a, b)
        self.dag.merge(a, b, keep)
        self.groups[keep] = sorted(self.groups[a] + self.groups[b], key=lambda o: self.pos[id(o)])
        for o in self.groups.pop(drop):
            self.gid[id(o)] = keep
        self.plans.pop(drop, None)
        self.plans[keep] = p

    def merge_greedily(self) -> None:
        """Try every candidate pair, best first, until a pass over them fuses nothing."""
        changed = True
        while changed:
            changed = False
            for saved, first_op, second_op, shared in self.candidates():
                if saved == 0 and not self.small_enough(first_op, second_op, shared):
                    continue
                changed |= self.attempt(first_op, second_op, shared)

    def combinable(self, g: int) -> bool:
        """Whether group `g` may be a combo's part (combo.py): pointwise ops and reductions of at
        most COMBO_MAX_REDUCED elements, over static sizes."""
        return all(self.fusible(o) and _static(o) and (  # type: ignore[arg-type]
            type(o) is Pointwise or (isinstance(o, Reduction) and self.numel(o) <= COMBO_MAX_REDUCED))
            for o in self.groups[g])  # static first: a symbolic count cannot be compared

    def combos(self) -> list[tuple[Operation, Operation, bool]]:
        """Pairs of combinable groups (combo.py), each named by its first op, and whether the
        combo runs late (at its last member's position): consecutive groups that read only the
        graph's inputs and write at most COMBO_MAX_EARLY_BYTES (early), then consecutive groups
        whose outputs are graph outputs that no operation outside them reads (late)."""
        sources: list[Operation] = []
        sinks: list[Operation] = []
        for g in sorted(self.groups, key=lambda g: self.pos[id(self.groups[g][0])]):
            ops = self.groups[g]
            mine = {b.name for o in ops for b in o.outputs}
            if all(r not in self.writer or r in mine for o in ops for r in self.op_reads[id(o)]):
                if (sum(self.nbytes(o, b.name) for o in ops for b in o.outputs) <= COMBO_MAX_EARLY_BYTES
                        and self.combinable(g)):  # last: the costliest test
                    sources.append(ops[0])
            elif not self.outside_readers(ops) and self.combinable(g):
                sinks.append(ops[0])
        return [(a, b, False) for a, b in itertools.pairwise(sources)] + [
            (a, b, True) for a, b in itertools.pairwise(sinks)]

    def group_plan(self, g: int) -> KernelGroup:
        """Group `g`'s plan (planned now, and kept, if fusion left it a single operation)."""
        got = self.plans.get(g)
        if got is None:
            members = self.groups[g]
            got = self.plans[g] = plan(members[0].name, members,  # type: ignore[arg-type]
                                       self.outside_readers(members), self.graph_outputs)
        return got

    def combine_launches(self) -> None:
        """Merge the pairs of `combos` into combo kernels, in order, each when the combo stays
        within COMBO_MAX_PARTS parts, neither group feeds the other (directly or through a
        third) and the peak of live bytes stays within the bound."""
        for first_op, second_op, late in self.combos():
            a, b = self.gid[id(first_op)], self.gid[id(second_op)]
            if a == b:
                continue
            parts = [self.group_plan(g) for g in (a, b)]
            if sum(len(p.parts) if isinstance(p, ComboGroup) else 1 for p in parts) > COMBO_MAX_PARTS:
                continue
            if a in self.dag.preds[b] or b in self.dag.preds[a] or self.dag.creates_cycle(a, b):
                self.record(a, b, False, "combo: one group depends on the other")
                continue
            if self.raises_peak(a, b, "combo: ", late):
                continue
            self.record(a, b, True, "combo")
            self.merge(a, b, combine(f"{parts[0].name}+{parts[1].name}", parts), late)

    def execution_order(self) -> list[int]:
        """The groups in a topological order: Kahn's algorithm, earliest original position first."""
        order: list[int] = []
        groups, pos = self.groups, self.pos
        indeg = {g: len(self.dag.preds[g]) for g in groups}
        succ: dict[int, set[int]] = {g: set() for g in groups}
        for g in groups:
            for pg in self.dag.preds[g]:
                succ[pg].add(g)
        ready = sorted((min(pos[id(o)] for o in groups[g]), g) for g in groups if indeg[g] == 0)
        heapq.heapify(ready)
        while ready:
            _, g = heapq.heappop(ready)
            order.append(g)
            for s in succ[g]:
                indeg[s] -= 1
                if indeg[s] == 0:
                    heapq.heappush(ready, (min(pos[id(o)] for o in groups[s]), s))
        if len(order) != len(groups):
            raise RuntimeError("scheduler: dependency cycle between kernel groups")
        return order

    def steps(self, order: list[int]) -> list[KernelGroup | ExternKernel | Scatter]:
        """One step per group in `order`: externs and scatters as they are, the others planned
        (a group fusion did not merge is planned here), kernel groups named by `kernel_name`."""
        result: list[KernelGroup | ExternKernel | Scatter] = []
        for g in order:
            members = self.groups[g]
            if len(members) == 1 and isinstance(members[0], ExternKernel | Scatter):
                result.append(members[0])
                continue
            kg = self.plans.get(g)
            if kg is None:
                kg = plan(members[0].name, members, self.outside_readers(members), self.graph_outputs)  # type: ignore[arg-type]
            result.append(kg)
        for i, step in enumerate(result):
            if isinstance(step, KernelGroup):
                step.name = kernel_name(i, step.origins())
            if isinstance(step, ComboGroup):
                name_parts(step)
        return result


def kernel_name(index: int, origins: list[str]) -> str:
    """``kernel<index>_<op>_<op>_<op>``: the step's index and the first distinct FX ops it fuses
    (FX node names without their numeric suffix), so that profiles say what a kernel computes."""
    ops: list[str] = []
    for o in origins:
        op = re.sub(r"(_\d+)+$", "", o)
        op = re.sub(r"\W", "_", op).strip("_")
        if op and op not in ops:
            ops.append(op)
    suffix = "_".join(ops[:3])[:48].strip("_")
    return f"kernel{index}_{suffix}" if suffix else f"kernel{index}"
