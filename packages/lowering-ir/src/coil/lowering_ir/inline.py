"""Inlining cheap Pointwise operations into readers that read them at another index.

The scheduler fuses a producer into a consumer only where the consumer reads each element at
the index it was written, so a Pointwise result read through a gather (log_softmax's output
read by nll_loss), at a shifted, masked position (`cat(-x2, x1)` in rotary embeddings) or
transposed is materialised: a full-size buffer and a kernel launch. `inline_pointwise`
substitutes such a producer's body into every Load of its buffer, so the buffer disappears.

A Pointwise P is inlined when
- its buffer is no graph output (nor viewed by one) and every reader is a Pointwise or a
  Reduction (never an ExternKernel or a Scatter);
- at least one read is not "direct": a direct read is unmasked, not data-dependent, and walks
  P's elements in P's store order (the reader's index, affine in its loop variables, has P's
  store index's offset and, merging loops that index memory as one, its strides and sizes;
  loops the index does not use are broadcasts). Graphs whose reads are all direct are left to
  the scheduler, unless P is *narrowing* (`_narrowing`: at most `MAX_NARROW_NODES` nodes, and
  its full-size loads add up to fewer bytes per element than its own dtype, e.g. a widening
  cast or `float(x_bf16) - mean`): then every reader recomputes it, which reads fewer bytes
  than a materialised copy would (a batch-norm backward under autocast stored two fp32
  [N, C, H, W] buffers, read twice each, for its reduction and its final pointwise); likewise
  when P is *broadcast-only* (`_broadcast_only`: it loads nothing at full size, only per-row
  or per-channel values, within `MAX_NODES`), and when P's one reader reads it directly but
  runs over more elements (a broadcast, which the scheduler cannot fuse: an inference batch
  norm's per-channel `rsqrt(var + eps)`) and P has at most `MAX_NARROW_NODES` nodes. A
  narrowing or broadcast-only P none of whose readers reads it directly is recomputed too when
  no read visits twice as many elements as P has (a batch norm's statistics of a bf16
  activation, split into partial reductions that walk it chunk by chunk, read an fp32 copy
  written for them alone: per element, a kernel reading 2 bytes and writing 4, then 4 bytes
  read per pass where 2 would do). A P that reads no buffer (constants, iota) is inlined into
  every reader, direct or broadcasting: recomputing it costs nothing, and a comparison with an
  iota it feeds then reads no buffer either and follows it into its own readers (a ViT
  backward's `arange(17) == 0` mask stayed a kernel of its own once the `where` reading it was
  inlined into the reductions after it);
- when P stays by these rules, it is tried once more with the Pointwise producers that only P
  reads, directly, substituted into it first (`_with_exclusive_producers`: the scheduler would
  fuse them into P anyway): a cross-entropy backward's bf16 one-hot gradient is a cast of an
  fp32 product, but with the comparison and the scaling before it counted in, it reads per-row
  labels and a scalar. If that chain is broadcast-only and P's readers take it, the whole chain
  goes (an LM head's logits-sized gradient buffer, read by its row sum and by the padded
  pointwise of the head's matmul); otherwise everything stays as it was;
- recomputing it is cheap: P reads no buffer, or P has one reader (its work moves there), or
  P is narrowing, or P is tiny, a read of it is not direct, no such read visits twice as many
  elements as P has or more (a broadcast read would recompute each element many times: rotary
  embeddings' sin and cos tables, read per head, made a training step slower; a read padded for
  a matmul visits a few more)
  and its full-size loads add up to exactly the bytes of its own dtype (`_loaded_bytes`: each
  reader then loads P's inputs instead of P, as many bytes, and P's buffer is never written:
  fp32 softmax over few long columns, whose split sum reads `exp(x - max)` across rows while
  the division reads it in place, stored that [8192, 4096] buffer and read it twice), or
  the reads that are not direct cover at most numel(P) / `FEW_READS` elements (a gather of one
  logit per row) and at most `MAX_DIRECT_READERS` readers read P directly (they are fused with
  P anyway). A P read in full by several readers stays: each would recompute it, and the
  producers it reads after them (a residual-gradient chain read by every weight-gradient
  reduction, whose loops run in another order, would be copied into all of them);
- its body is cheap (`MAX_NODES` value nodes, `MAX_LOADS` loads, no random numbers), no
  buffer it reads is mutated (a `copy_` epilogue) between P and its readers, and no reader
  grows past `MAX_READER_NODES` by more than `MAX_NODES` nodes (a reader that reads P at many
  places, level after level, would grow exponentially);
- every read can take the body (all or nothing per P): the reader's index decomposes into P's
  loop variables (`index_ranges.decompose`, which knows the reader's loop ranges, the bounds
  of data-dependent indices and the ranges the load's mask implies) into expressions with no
  floor or mod that the C-semantics printer could get wrong.

Substitution at one Load `ld` of P's buffer: P's loop variables become the decomposed position
(a body index equal to P's store index plus a constant becomes `ld.index` plus it), P's own
data-dependent symbols get fresh names, every inner load gets `ld`'s mask ANDed into its own
and `ld`'s data-dependent bindings its index uses, and the value is cast to P's buffer dtype
(what a store and a reload give) and, for a masked `ld`, `where(mask, value, 0)`. Operations
are visited last to first and the sweep repeats until nothing changes, so chains of cheap ops
inline step by step in one sweep; `MAX_NODES` bounds what each step copies, `MAX_READER_NODES`
what the copies add up to.

Off with COIL_INLINE=0 (knob `inline` of `coil.knobs`).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence

import sympy
import torch
from coil.lowering_ir import index_ranges
from coil.lowering_ir.index_ranges import Bounds, decompose, printable
from coil.lowering_ir.layout import Expr
from coil.lowering_ir.nodes import (
    Buffer,
    ExternKernel,
    Operation,
    Pointwise,
    Reduction,
    ReinterpretView,
)
from coil.lowering_ir.ops.common import cast
from coil.lowering_ir.values import (
    Constant,
    IndexValue,
    Load,
    Op,
    Value,
    children,
    indirect_bound,
    indirect_symbol,
    loads,
)

MAX_NODES = 32          # value nodes in an inlined body
MAX_LOADS = 8           # loads in an inlined body
MAX_READER_NODES = 128  # a reader grows past this only by at most MAX_NODES per inlining
FEW_READS = 8           # P with several readers: the reads not direct cover <= numel(P) / this
MAX_DIRECT_READERS = 2  # ... and at most this many readers read it directly
MAX_NARROW_NODES = 8    # a P read directly by several readers is recomputed by each when it is
                        # this small and narrowing (`_narrowing`)
_INT_DIVISION = ("floordiv", "truncdiv", "remainder", "fmod")


class _Reject(Exception):
    """This read cannot take the body (inlining of this producer is abandoned)."""


def inline_pointwise(operations: list[Operation], outputs: list[object]) -> list[Operation]:
    """`operations` with every cheap Pointwise read at another index substituted into its
    readers and removed (see the module docstring). Semantics are unchanged."""
    ops: list[Operation | None] = list(operations)
    protected: set[str] = set()
    _mark(outputs, protected)
    memo = _Memo()
    # P that stayed, with the readers it had then: the decision depends only on P and its
    # readers (the externs between them never change), so a later sweep skips P until one of
    # its readers was rewritten (the objects are kept, so their ids are not reused)
    stayed: dict[int, tuple[Pointwise, tuple[Operation | None, ...]]] = {}
    changed = True
    while changed:
        changed = False
        readers, producers = _readers(ops), _producers(ops)
        for i in range(len(ops) - 1, -1, -1):
            p = ops[i]
            if not isinstance(p, Pointwise) or p.output.name in protected:
                continue
            rs = readers.get(p.output.name, [])
            now = tuple(ops[j] for j in rs)
            before = stayed.get(id(p))
            if before is not None and before[0] is p and len(before[1]) == len(now) and all(
                    a is b for a, b in zip(before[1], now, strict=True)):
                continue
            new = _try_inline(p, i, rs, ops, memo)
            gone: list[int] = []
            if new is None:
                expanded = _with_exclusive_producers(p, i, ops, readers, producers, protected, memo)
                if expanded is not None:
                    new = _try_inline(expanded[0], i, rs, ops, memo)
                    gone = expanded[1]
            if new is None:
                stayed[id(p)] = (p, now)
                continue
            for j, op in zip(rs, new, strict=True):
                ops[j] = op
            for q in gone:  # the producers substituted into P went with it
                ops[q] = None
            ops[i] = None
            if gone:  # the producers went too: count again
                readers, producers = _readers(ops), _producers(ops)
            else:
                for b in p.reads():
                    readers[b] = sorted((set(readers.get(b, [])) - {i}) | set(rs))
            changed = True
        ops = [op for op in ops if op is not None]
    return [op for op in ops if op is not None]


def _mark(x: object, names: set[str]) -> None:
    if isinstance(x, Buffer | ReinterpretView):
        names.add(x.storage.name)
    elif isinstance(x, list | tuple):
        for y in x:
            _mark(y, names)


def _readers(ops: Sequence[Operation | None]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for j, op in enumerate(ops):
        if op is not None:
            for b in op.reads():
                out.setdefault(b, []).append(j)
    return out


def _producers(ops: Sequence[Operation | None]) -> dict[str, int]:
    """The index of each Pointwise, by the buffer it writes."""
    return {op.output.name: j for j, op in enumerate(ops) if isinstance(op, Pointwise)}


def _nodes(body: Value) -> list[Value]:
    """Every distinct value node of `body` (by identity), loads' masks and indices included."""
    seen: dict[int, Value] = {}
    stack = [body]
    while stack:
        v = stack.pop()
        if id(v) not in seen:
            seen[id(v)] = v
            stack.extend(children(v))
    return list(seen.values())


class _Memo:
    """Per-call caches of what is asked about the same bodies in every sweep (keyed by
    identity; the object is kept so that an id is never reused while cached)."""

    def __init__(self) -> None:
        self._nodes: dict[int, tuple[Value, list[Value]]] = {}
        self._loads: dict[int, tuple[Value, list[Load]]] = {}

    def nodes(self, body: Value) -> list[Value]:
        got = self._nodes.get(id(body))
        if got is None or got[0] is not body:
            got = self._nodes[id(body)] = (body, _nodes(body))
        return got[1]

    def loads(self, body: Value) -> list[Load]:
        got = self._loads.get(id(body))
        if got is None or got[0] is not body:
            got = self._loads[id(body)] = (body, loads(body))
        return got[1]


def _numel(op: Pointwise | Reduction) -> Expr:
    sizes = list(op.ranges) + (list(op.reduction_ranges) if isinstance(op, Reduction) else [])
    return sympy.Mul(*sizes) if sizes else sympy.Integer(1)


def _try_inline(p: Pointwise, at: int, rs: list[int], ops: Sequence[Operation | None],
                memo: _Memo) -> list[Pointwise | Reduction] | None:
    """The readers rewritten with P's body substituted, or None when P stays."""
    if not rs:
        return None
    readers = [r for r in (ops[j] for j in rs) if isinstance(r, Pointwise | Reduction)]
    if len(readers) != len(rs):
        return None
    nodes = memo.nodes(p.body)
    if len(nodes) > MAX_NODES or sum(isinstance(v, Load) for v in nodes) > MAX_LOADS:
        return None
    if any(isinstance(v, Op) and v.name in ("rand", "randn") for v in nodes):
        return None
    reads = set(p.reads())
    for op in ops[at + 1:max(rs)]:
        if isinstance(op, ExternKernel) and reads & set(op.mutates):
            return None
    load_free = not any(isinstance(v, Load) for v in nodes)
    name = p.output.name
    elsewhere: Expr = sympy.Integer(0)  # elements read by the reads that are not direct
    direct: set[str] = set()
    repeated = False  # a read that is not direct visits each element of P twice or more (a broadcast)
    widened = False  # a direct read from a wider space than P's: the scheduler cannot fuse it
    for r in readers:
        for ld in memo.loads(r.body):
            if ld.buffer != name:
                continue
            if _direct(ld, r, p, load_free):
                direct.add(r.name)
                widened = widened or _wider(r, p)
            else:
                elsewhere += _numel(r)
                repeated = repeated or not index_ranges.le(_numel(r), 2 * _numel(p))
    # narrowing (or broadcast-only) P read directly, or elsewhere each element at most about once:
    # every reader loads fewer bytes recomputing P than reloading it (a split batch-norm
    # statistic of a bf16 activation read a materialised fp32 copy, written for it alone)
    narrowing = (bool(direct) or (elsewhere != 0 and not repeated)) and (
        _narrowing(p, nodes) or _broadcast_only(p, nodes))
    # one reader broadcasting a small P over a wider space (an inference batch norm's
    # rsqrt(var + eps) per channel, read per element): fused by no one, P would be a kernel of
    # its own; the reader recomputes it per element instead
    lone_broadcast = widened and len(readers) == 1 and len(nodes) <= MAX_NARROW_NODES
    if elsewhere == 0 and not narrowing and not load_free and not lone_broadcast:
        return None
    few = len(direct) <= MAX_DIRECT_READERS and index_ranges.le(FEW_READS * elsewhere, _numel(p))
    # read elsewhere, each element once a read, and no wider than what it loads: each reader
    # loads P's inputs instead of P
    same_bytes = (elsewhere != 0 and not repeated
                  and _loaded_bytes(p, nodes) == p.output.layout.dtype.itemsize)
    if not (load_free or len(readers) == 1 or few or narrowing or same_bytes):
        return None  # each reader would recompute P over as many elements as P has
    try:
        new = [_substitute(r, p) for r in readers]
    except _Reject:
        return None
    for old, got in zip(readers, new, strict=True):
        n_old, n_new = len(memo.nodes(old.body)), len(memo.nodes(got.body))
        if n_new > MAX_READER_NODES and n_new - n_old > MAX_NODES:
            return None  # e.g. a stencil of stencils: each level would double the reader
    return new


def _with_exclusive_producers(p: Pointwise, at: int, ops: Sequence[Operation | None],
                              readers: dict[str, list[int]], producers: dict[str, int], protected: set[str],
                              memo: _Memo) -> tuple[Pointwise, list[int]] | None:
    """P with the Pointwise producers only P reads (directly, so the scheduler would fuse them
    into P anyway) substituted into its body, and their indices; None unless the result reads
    nothing at full size (`_broadcast_only`): the chain `iota == labels[:, None]`, `where`, `* scale`,
    `.to(bf16)` of a cross-entropy backward reads per-row labels and a scalar, while its last
    link alone reads the full-size fp32 product before it. Returned only as a candidate: the
    caller inlines it into P's readers or keeps everything as it was."""
    gone: list[int] = []
    body = p
    grew = True
    while grew:
        grew = False
        for ld in memo.loads(body.body):
            q_at = producers.get(ld.buffer)
            if q_at is None or q_at in gone or ld.buffer in protected or readers.get(ld.buffer) != [at]:
                continue
            q = ops[q_at]
            if not isinstance(q, Pointwise) or not _direct(ld, body, q, False):
                continue
            if any(isinstance(op, ExternKernel) and set(q.reads()) & set(op.mutates) for op in ops[q_at + 1:at]):
                continue
            try:
                cand = _substitute(body, q)
            except _Reject:
                continue
            if len(memo.nodes(cand.body)) > MAX_NODES:
                return None
            assert isinstance(cand, Pointwise)
            body, grew = cand, True
            gone.append(q_at)
            break
    if not gone or not _broadcast_only(body, memo.nodes(body.body)):
        return None
    return body, gone


def _broadcast_only(p: Pointwise, nodes: list[Value]) -> bool:
    """P loads something, but nothing at full size (every load's index leaves out a loop of P
    longer than 1, and none is data-dependent: a gather, `table[ids[n], d]`, reads a full row
    per element whatever its index shows): recomputing an element reads no more than a few
    per-row values."""
    loops = {sym for sym, n in _loop_vars(p) if n != 1}
    lds = [v for v in nodes if isinstance(v, Load)]
    return bool(lds) and len(p.ranges) > 0 and not any(v.indirect or loops <= v.index.free_symbols for v in lds)


def _narrowing(p: Pointwise, nodes: list[Value]) -> bool:
    """P is tiny and recomputing it reads fewer bytes per element than reloading its buffer:
    the full-size loads of its body (those whose index uses every loop variable of P longer
    than 1; broadcast loads of per-channel statistics are not counted) add up to fewer bytes
    than P's dtype holds, e.g. `float(x_bf16) - mean` or a plain widening cast. Each of P's
    direct readers then recomputes it instead of reading a wider materialised copy."""
    return 0 < _loaded_bytes(p, nodes) < p.output.layout.dtype.itemsize


def _loaded_bytes(p: Pointwise, nodes: list[Value]) -> int:
    """The bytes per element P's full-size loads add up to (those whose index uses every loop
    variable of P longer than 1; broadcast loads of per-row or per-channel values are not
    counted); 0 when P is not tiny (more than `MAX_NARROW_NODES` nodes) or has no loops, so
    only a tiny P is recomputed by several readers on the strength of this count."""
    if len(nodes) > MAX_NARROW_NODES or len(p.ranges) == 0:
        return 0
    loops = {sym for sym, n in _loop_vars(p) if n != 1}
    return sum(v.dtype.itemsize for v in nodes
               if isinstance(v, Load) and v.mask is None and loops <= v.index.free_symbols)


# -- direct reads ----------------------------------------------------------------------------------


@functools.cache
def _sym(name: str) -> sympy.Symbol:
    return sympy.Symbol(name, integer=True, nonnegative=True)


def _loop_vars(op: Pointwise | Reduction) -> list[tuple[sympy.Symbol, Expr]]:
    """The operation's loop variables with their sizes, outermost first (p, then r)."""
    out = [(_sym(f"p{i}"), n) for i, n in enumerate(op.ranges)]
    if isinstance(op, Reduction):
        out += [(_sym(f"r{i}"), n) for i, n in enumerate(op.reduction_ranges)]
    return out


@functools.lru_cache(maxsize=1 << 14)
def _walk(index: Expr, loops: tuple[tuple[sympy.Symbol, Expr], ...]
          ) -> tuple[Expr, tuple[tuple[Expr, Expr], ...], bool] | None:
    """(offset, ((stride, size), ...) with loops merged, broadcast) of an index affine in the
    loop variables; `broadcast`: a loop of size > 1 the index does not use. None if not affine.
    Memoised: every sweep asks again for the same producers' store indices."""
    e = sympy.expand(index)
    syms = {v for v, _ in loops}
    items: list[tuple[Expr, Expr]] = []
    rest = e
    broadcast = False
    for v, n in loops:
        c = e.coeff(v)
        if c.free_symbols & syms:
            return None
        rest = rest - c * v
        if n == 1:
            continue
        if c == 0:
            broadcast = True
            continue
        items.append((c, n))
    rest = sympy.expand(rest)
    if rest.free_symbols & syms or any(s.name.startswith("ind") for s in rest.free_symbols):
        return None
    merged: list[tuple[Expr, Expr]] = []
    for c, n in items:
        if merged and sympy.expand(merged[-1][0] - c * n) == 0:
            merged[-1] = (c, merged[-1][1] * n)
        else:
            merged.append((c, n))
    return rest, tuple(merged), broadcast


def _wider(reader: Pointwise | Reduction, p: Pointwise) -> bool:
    """Does `reader` run over provably more elements than P in the loops a fusion would share
    (a Pointwise's loops, a Reduction's output loops)? Then the scheduler, which fuses only
    groups of one iteration space, cannot fuse P into it."""
    space = sympy.Mul(*reader.ranges) if reader.ranges else sympy.Integer(1)
    return index_ranges.le(_numel(p) + 1, space)


def _direct(ld: Load, reader: Pointwise | Reduction, p: Pointwise, load_free: bool) -> bool:
    """Does `reader` read P's buffer through `ld` in P's store order (see the module docstring)?"""
    if ld.mask is not None or ld.indirect:
        return False
    got = _walk(ld.index, tuple(_loop_vars(reader)))
    want = _walk(p.store_index, tuple(_loop_vars(p)))
    if got is None or want is None:
        return False
    if load_free and got[2]:
        return False
    if sympy.expand(got[0] - want[0]) != 0 or len(got[1]) != len(want[1]):
        return False
    return all(sympy.expand(a - c) == 0 and sympy.expand(b - d) == 0
               for (a, b), (c, d) in zip(got[1], want[1], strict=True))


# -- substitution ----------------------------------------------------------------------------------


def _substitute(reader: Pointwise | Reduction, p: Pointwise) -> Pointwise | Reduction:
    """`reader` with every Load of P's buffer replaced by P's body there; raises _Reject."""
    ranges: dict[sympy.Symbol, Bounds] = {v: (sympy.Integer(0), n - 1) for v, n in _loop_vars(reader)}
    memo: dict[int, Value] = {}
    name = p.output.name

    def go(v: Value) -> Value:
        got = memo.get(id(v))
        if got is not None:
            return got
        out: Value
        if isinstance(v, Load):
            mask = go(v.mask) if v.mask is not None else None
            ind = tuple((s, go(val)) for s, val in v.indirect)
            rebuilt = v if mask is v.mask and all(a is b for (_, a), (_, b) in zip(ind, v.indirect, strict=True)) \
                else Load(v.buffer, v.index, v.dtype, mask, ind)
            out = _expand(p, rebuilt, ranges) if v.buffer == name else rebuilt
        elif isinstance(v, Op):
            args = tuple(go(a) for a in v.args)
            out = v if all(a is b for a, b in zip(args, v.args, strict=True)) else Op(v.name, args, v.dtype)
        else:
            out = v
        memo[id(v)] = out
        return out

    body = go(reader.body)
    origins = reader.origins + tuple(o for o in p.origins if o not in reader.origins)
    return dataclasses.replace(reader, body=body, origins=origins)


def _mask_ranges(mask: Value | None, ranges: dict[sympy.Symbol, Bounds]) -> dict[sympy.Symbol, Bounds]:
    """`ranges` narrowed by the comparisons of one loop variable (plus a constant) with an
    integer constant that `mask` ANDs together (what cat, constant_pad_nd and the remaps
    build); anything else in the mask is ignored (narrowing less is always sound)."""
    out = dict(ranges)
    if mask is None:
        return out
    conds: list[Value] = []
    stack = [mask]
    while stack:
        v = stack.pop()
        if isinstance(v, Op) and v.name == "logical_and":
            stack.extend(v.args)
        else:
            conds.append(v)
    flip = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le", "eq": "eq"}
    for c in conds:
        if not (isinstance(c, Op) and c.name in flip):
            continue
        a, b = c.args
        op = c.name
        if isinstance(a, Constant) and isinstance(b, IndexValue):
            a, b, op = b, a, flip[op]
        if not (isinstance(a, IndexValue) and isinstance(b, Constant)) or isinstance(b.value, float):
            continue
        syms = [s for s in a.index.free_symbols if s in out]
        if len(syms) != 1:
            continue
        s = syms[0]
        shift = sympy.expand(a.index - s)
        if shift.free_symbols:
            continue
        k = sympy.Integer(int(b.value)) - shift  # s (op) k
        lo, hi = out[s]
        if op in ("lt", "le"):
            hi = sympy.Min(hi, k - 1 if op == "lt" else k)
        elif op in ("gt", "ge"):
            lo = sympy.Max(lo, k + 1 if op == "gt" else k)
        else:
            lo, hi = k, k
        out[s] = (lo, hi)
    return out


def _expand(p: Pointwise, ld: Load, loop_ranges: dict[sympy.Symbol, Bounds]) -> Value:
    """P's body at the element `ld` reads (see the module docstring); raises _Reject."""
    ranges = _mask_ranges(ld.mask, loop_ranges)
    for s, _ in ld.indirect:
        b = indirect_bound(s)
        if b is None:
            raise _Reject
        ranges[s] = (sympy.Integer(0), b - 1)
    ploops = _loop_vars(p)
    pvars = [v for v, _ in ploops]
    store = p.store_index
    coords: list[Expr] | None
    if not ld.indirect and sympy.expand(ld.index - store) == 0 and all(
            v in ranges and index_ranges.le(ranges[v][1], n - 1) for v, n in ploops if v in store.free_symbols):
        coords = list(pvars)  # read at P's own index over P's own ranges: the same position
    else:
        coords = decompose(ld.index, p.output.layout, ranges)
    if coords is None:
        raise _Reject
    sub = dict(zip(pvars, coords, strict=True))
    rename: dict[sympy.Symbol, sympy.Symbol] = {}
    for inner in loads(p.body):
        for s, _ in inner.indirect:
            if s not in rename:
                rename[s] = indirect_symbol(indirect_bound(s))
                b = indirect_bound(s)
                if b is not None:
                    ranges[rename[s]] = (sympy.Integer(0), b - 1)
    reader_syms = {s for s, _ in ld.indirect}
    pset = set(pvars)
    masked = ld.mask is not None

    def index(e: Expr) -> Expr:
        d = sympy.expand(e - store)
        new = sympy.expand(ld.index + d) if not (d.free_symbols & pset) else sympy.expand(e.xreplace(sub))
        new = new.xreplace(rename)
        if not printable(new, ranges):
            raise _Reject
        return new

    memo: dict[int, Value] = {}

    def go(v: Value) -> Value:
        got = memo.get(id(v))
        if got is not None:
            return got
        out: Value
        if isinstance(v, Load):
            idx = index(v.index)
            inner_mask = go(v.mask) if v.mask is not None else None
            if ld.mask is not None:
                inner_mask = ld.mask if inner_mask is None else Op("logical_and", (ld.mask, inner_mask), torch.bool)
            ind = tuple((rename[s], go(val)) for s, val in v.indirect)
            ind += tuple((s, val) for s, val in ld.indirect if s in idx.free_symbols)
            out = Load(v.buffer, idx, v.dtype, inner_mask, ind)
        elif isinstance(v, IndexValue):
            idx = index(v.index)
            if idx.free_symbols & (reader_syms | set(rename.values())):
                raise _Reject  # an index value cannot see a data-dependent index
            out = IndexValue(idx, v.dtype)
        elif isinstance(v, Op):
            if masked and v.name in _INT_DIVISION and not v.dtype.is_floating_point:
                raise _Reject  # masked-off lanes would divide by the 0 a masked load gives
            out = Op(v.name, tuple(go(a) for a in v.args), v.dtype)
        else:
            out = v
        memo[id(v)] = out
        return out

    dt = p.output.layout.dtype
    value = cast(go(p.body), dt)
    if ld.mask is not None:
        zero = Constant(False if dt == torch.bool else 0.0 if dt.is_floating_point else 0, dt)
        value = Op("where", (ld.mask, value, zero), dt)
    return value
