"""Give matrix-multiply operands and results 16-byte-aligned row strides (cuBLAS's fast path).

cuBLAS runs its tensor-core kernels only when every matrix's leading dimension is a multiple of
16 bytes. A vocabulary of 50 257 (GPT-2) or 30 522 (BERT) makes the logits' rows 100 514 and
61 044 bytes long, and the projection onto them falls back to an ``align1`` kernel several
times slower; so do Swin's window attention products, whose 7 x 7 = 49 tokens make the scores'
rows 98 bytes long and ``P @ V`` reduce over 49 (docs/perf.md has the figures).

The pass keeps every value and every shape; only strides change. The rules hold for products
of matrices (``mm``, ``addmm``) and for batched products (``bmm``: the matrices are the last
two dims, the batch dim is carried along; ``baddbmm`` decomposes into ``bmm`` before the pass
runs); ``N`` is the result's row length, ``K`` the inner length, ``M`` the row count:

* a product whose result has an unaligned row (``N``): when ``B`` is ``t(W)`` of a contiguous
  ``W`` the graph computes (an LM head's weight cast to bf16 under autocast), ``W`` itself is
  padded with zero rows to ``N_pad`` and every other user of ``W`` (a graph output too: the
  forward saves it for the backward) reads its first rows, same shape and strides, so one
  buffer serves both (one ``[V, D]`` weight copy less at the end of the forward) and the pad fuses into
  ``W``'s producer; the result is the slice ``[:, :N]`` of the aligned ``[M, N_pad]`` product;
* when ``B`` is column-major with an aligned leading dimension but not computed here (an
  inference graph's ``t(W)`` of a weight that is a graph input) and the result must keep its
  contiguous layout (a graph output), the product is split by columns instead:
  ``cat([A @ B[:, :N8], A @ B[:, N8:]], 1)`` with ``N8`` the largest aligned width <= ``N``
  (bias sliced alike), cheaper than a padded product plus a contiguous copy of its result; so
  is a product whose slice some view cannot take (a flatten of the rows);
* any other product with an unaligned result is computed on a ``B`` (and bias) padded with
  zero columns to ``N_pad`` (a column-major ``B``, such as a batch of keys ``k^T``, through
  zero rows of its transpose: a coalesced copy, fused into ``k``'s producer), and the result
  is the slice ``[..., :N]``; a batched result that must stay a contiguous graph output is left
  as it is (no split exists for it, and a copy of the whole result costs what the aligned
  kernel saves);
* an operand whose rows are unaligned is traced back through views (a batch's ``view``,
  ``_unsafe_view`` and ``expand`` too) to the tensor that owns its storage (for example the
  logits' gradient, seen by the backward's two products as a 2-D view and its transpose); that
  tensor is padded once (``constant_pad_nd``, which the scheduler fuses into its producer, or a
  copy when it is a graph input such as the logits' gradient of a backward graph) and every
  user reads the slice ``[..., :N]`` of the padded copy; a tensor that a graph output is or
  views is left alone (the output must keep aliasing it). A batched product's operand that is a
  softmax over the last dim (attention probabilities) is instead recomputed over its input
  padded with ``-inf`` (:mod:`.softmax_rows`): its padded columns are exact zeros and it stays
  one reduction kernel, where a pad of its result would be a second kernel;
* a product whose inner length ``K`` or row count ``M`` is unaligned (an LM head's backward:
  ``dlogits @ W`` reduces over the vocabulary, ``t(dlogits) @ h`` has a row per token of it;
  attention's ``P @ V`` reduces over the tokens) runs on operands extended with zeros to the
  aligned length: cuBLAS picks ``align1`` kernels for such a product even when every leading
  dimension is aligned (several times slower). An operand that is a view of a slice of a
  tensor whose extra columns are zeros by construction (a zero ``constant_pad_nd``; for a
  batched product also a padded ``bmm`` or a softmax over ``-inf`` padding, which the rules
  above made) is extended for free by reading that tensor through the same views; any other is
  padded along ``K`` (``constant_pad_nd``, fused into its producer, e.g. the copy that splits
  ``V``'s heads, or a copy of an input). ``M`` is padded only for free; the result's first
  ``M`` rows are what users read.

A pad these rules add, of a tensor this graph computes and also reads elsewhere (a backward's
keys, split off by a copy that two products read), is then moved onto that tensor's buffer
(:mod:`.pad_owner`): the tensor is computed padded, in one kernel, and its other readers read
the slice. Not when a graph output is or views the tensor: a saved activation would stay
padded until the backward runs (Swin-T's keys and values: 1/7 more bytes held).

Graph outputs keep their strides: where an output's strides would change, the output is a
contiguous clone, except the outputs free to change layout: every output of a graph marked
:data:`PADDED_OUTPUTS` (an inference graph: its outputs go to the caller alone, as Inductor's
padded products do) and the positions in ``gm.meta[FREE_OUTPUTS]`` (activations a forward
saves for a backward that adopts their strides, :mod:`.channels_last`). Such an output may be the
slice ``[..., :N]`` of a padded product, and such a product is never split: read through a slice,
a padded product costs no copy at all (docs/perf.md has the figures). A rewrite whose strides
some view cannot take (a flatten of the padded rows) is undone. Only products of at least
:data:`MIN_WORK` multiply-adds (``B * M * N * K``, ``B = 1`` for a matrix product) on CUDA
tensors are touched (``COIL_PAD_MM=0`` turns the pass off); :func:`pad_matmul_strides_for`
takes other devices and sizes, for tests.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

import torch
from coil.fx_passes.fake_meta import fake_mode_of, refresh_meta
from coil.fx_passes.infra import PassResult, Stage, graph_pass
from coil.fx_passes.ops import overload_of
from coil.fx_passes.passes.channels_last import FREE_OUTPUTS
from coil.fx_passes.passes.pad_owner import CHAIN_VIEWS, absorb_pad
from coil.fx_passes.passes.softmax_rows import Softmax, recompute_on_padded_rows, softmax_of
from coil.knobs import knobs
from torch.fx import GraphModule, Node
from torch.fx.node import Argument

__all__ = ["MIN_WORK", "PADDED_OUTPUTS", "pad_matmul_strides", "pad_matmul_strides_for"]

aten = torch.ops.aten

ALIGN_BYTES = 16
MIN_WORK = 1 << 27  # B*M*N*K; below it a padding copy costs about what the slow kernel loses
_MATMULS = frozenset({aten.mm.default, aten.addmm.default, aten.bmm.default})
_VIEWS = frozenset({
    aten.view.default, aten._unsafe_view.default, aten.t.default, aten.transpose.int,
    aten.permute.default, aten.slice.Tensor, aten.expand.default,
})  # fmt: skip
_FLOATS = frozenset({torch.float16, torch.bfloat16, torch.float32})
SPLIT_MARK = "coil_pad_mm_split"  # meta key of the B column slices `_split_result` makes
# graph-module meta key: True when every output may be a row-padded view of its shape (the
# backend marks inference graphs: the caller alone reads their outputs)
PADDED_OUTPUTS = "coil_padded_outputs"


def _val(node: object) -> torch.Tensor | None:
    v = node.meta.get("val") if isinstance(node, Node) else None
    return v if isinstance(v, torch.Tensor) else None


def _static(t: torch.Tensor) -> bool:
    return all(isinstance(d, int) for d in (*t.shape, *t.stride(), t.storage_offset()))


def _align(t: torch.Tensor) -> int:
    return max(1, ALIGN_BYTES // t.element_size())


def _leading_dim(t: torch.Tensor) -> int | None:
    """The BLAS leading dimension of an operand's matrices, its last two dims (None when they
    are neither row- nor column-major)."""
    s0, s1 = t.stride()[-2:]
    if s1 == 1 or t.shape[-1] == 1:
        return int(s0)
    if s0 == 1 or t.shape[-2] == 1:
        return int(s1)
    return None


def _unaligned(t: torch.Tensor) -> bool:
    ld = _leading_dim(t)
    return ld is not None and ld % _align(t) != 0 and min(t.shape[-2:]) > 1


@dataclass(frozen=True)
class _Rewrite:
    """Undo information for one rewrite: nodes it added, uses it moved, args it changed."""

    added: tuple[Node, ...]
    moved_from: Node
    moved_to: Node
    changed_args: tuple[tuple[Node, tuple[Argument, ...]], ...] = ()
    also_moved: tuple[tuple[Node, Node], ...] = ()  # (from, to): further uses moved


def _storage_owner(node: Node) -> Node:
    """Follow views back to the node whose result owns the storage."""
    while overload_of(node) in _VIEWS and isinstance(node.args[0], Node):
        node = node.args[0]
    return node


def _aliased_by_output(node: Node) -> bool:
    """Whether a graph output is ``node`` or a view of it (then its storage must stay)."""
    todo, seen = [node], set()
    while todo:
        n = todo.pop()
        for u in n.users:
            if u.op == "output":
                return True
            if overload_of(u) in _VIEWS and u not in seen:
                seen.add(u)
                todo.append(u)
    return False


def _outputs(gm: GraphModule) -> Node:
    out: Node = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    return out


def _output_strides(gm: GraphModule) -> dict[Node, tuple[int, ...]]:
    out: dict[Node, tuple[int, ...]] = {}
    for n in _outputs(gm).all_input_nodes:
        v = _val(n)
        if v is not None:
            out[n] = tuple(v.stride())
    return out


def _contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for d in reversed(shape):
        strides.append(step)
        step *= max(int(d), 1)
    return tuple(reversed(strides))


def _padded_slice(gm: GraphModule, source: Node, after: Node, dim: int = -1) -> tuple[Node, Node]:
    """``slice(constant_pad_nd(source, ...), dim, 0, n)`` inserted after ``after``: ``source``
    padded with zeros at the end of ``dim`` to an aligned length, then cut back to its ``n``."""
    v = _val(source)
    assert v is not None
    d = dim % v.dim()
    n = int(v.shape[d])
    pad = -n % _align(v)
    if after.op == "placeholder":  # a graph input: pad it after the last placeholder
        after = [p for p in gm.graph.nodes if p.op == "placeholder"][-1]
    widths = [0] * (2 * (v.dim() - d))  # constant_pad_nd lists (before, after) from the last dim
    widths[-1] = pad
    with gm.graph.inserting_after(after):
        padded = gm.graph.call_function(aten.constant_pad_nd.default, (source, widths, 0.0))
    with gm.graph.inserting_after(padded):
        sliced = gm.graph.call_function(aten.slice.Tensor, (padded, d, 0, n))
    return padded, sliced


def _pad_source(gm: GraphModule, source: Node) -> _Rewrite:
    """Every user of ``source`` except the graph output reads a slice of its padded copy."""
    padded, sliced = _padded_slice(gm, source, source)
    out = _outputs(gm)
    source.replace_all_uses_with(sliced, delete_user_cb=lambda u: u is not padded and u is not out)
    return _Rewrite((padded, sliced), source, sliced)


def _pad_softmax(gm: GraphModule, owner: Node, sm: Softmax) -> _Rewrite:
    """Every user of the softmax ``owner`` reads ``[..., :N]`` of the softmax over its input
    padded with ``-inf`` (:mod:`.softmax_rows`): zero columns, in the softmax's own kernel."""
    v = _val(owner)
    assert v is not None
    n = int(v.shape[-1])
    nodes = recompute_on_padded_rows(gm, sm, -n % _align(v))
    with gm.graph.inserting_after(nodes[-1]):
        sliced = gm.graph.call_function(aten.slice.Tensor, (nodes[-1], v.dim() - 1, 0, n))
    owner.replace_all_uses_with(sliced, delete_user_cb=lambda u: u is not sliced)
    return _Rewrite((*nodes, sliced), owner, sliced)


def _column_bias(mm: Node) -> Argument | None:
    """An ``addmm``'s bias when it has a column per result column (so a rewrite of the product's
    columns pads or slices it too); None for ``mm`` and for a bias broadcast along the columns."""
    if overload_of(mm) is not aten.addmm.default:
        return None
    biv = _val(mm.args[0])
    return mm.args[0] if biv is not None and biv.dim() >= 1 and biv.shape[-1] != 1 else None


def _transposed(gm: GraphModule, x: Node, ndim: int) -> Node:
    """``x`` with its last two dims swapped (``t`` of a matrix, ``transpose`` of a batch)."""
    if ndim == 2:
        return gm.graph.call_function(aten.t.default, (x,))
    return gm.graph.call_function(aten.transpose.int, (x, ndim - 2, ndim - 1))


def _pad_result(gm: GraphModule, mm: Node) -> _Rewrite:
    """``mm``/``addmm``/``bmm`` on zero-padded columns of B (and bias); users read ``[..., :N]``."""
    args = mm.args
    b = args[-1]
    assert isinstance(b, Node)
    added: list[Node] = []
    moved: list[tuple[Node, Node]] = []
    with gm.graph.inserting_before(mm):
        bv = _val(b)
        assert bv is not None
        col = bv.dim() - 1  # B's column dim: the result's too
        pad = -int(bv.shape[col]) % _align(bv)
        owner = _weight_owner(b, bv) if bv.dim() == 2 else None
        if owner is not None:  # W computed here: it becomes the first rows of its padded self
            w_pad, w_rows = _padded_slice(gm, owner, owner, dim=0)
            # every other user of W (graph outputs too: same shape and strides) reads the rows;
            # the scheduler fuses the pad into W's producer, so one buffer holds both
            owner.replace_all_uses_with(w_rows, delete_user_cb=lambda u: u is not w_pad)
            new_b = gm.graph.call_function(aten.t.default, (w_pad,))
            added += [w_pad, w_rows, new_b]
            moved.append((owner, w_rows))
        elif bv.stride(col - 1) == 1 and bv.shape[col - 1] > 1:  # B = t(W): pad W's rows, a coalesced copy
            w = _transposed(gm, b, bv.dim())
            padded = gm.graph.call_function(aten.constant_pad_nd.default, (w, [0, 0, 0, pad], 0.0))
            new_b = _transposed(gm, padded, bv.dim())
            added += [w, padded, new_b]
        else:
            new_b = gm.graph.call_function(aten.constant_pad_nd.default, (b, [0, pad], 0.0))
            added.append(new_b)
        new_args: tuple[Argument, ...] = (*args[:-1], new_b)
        bias = _column_bias(mm)
        if bias is not None:
            new_bias = gm.graph.call_function(aten.constant_pad_nd.default, (bias, [0, pad], 0.0))
            added.append(new_bias)
            new_args = (new_bias, *new_args[1:])
    n = int(bv.shape[col])
    with gm.graph.inserting_after(mm):
        sliced = gm.graph.call_function(aten.slice.Tensor, (mm, col, 0, n))
    added.append(sliced)
    mm.replace_all_uses_with(sliced, delete_user_cb=lambda u: u is not sliced)
    old = (mm, tuple(mm.args))
    mm.args = new_args
    return _Rewrite(tuple(added), mm, sliced, (old,), tuple(moved))


def _splittable(mm: Node) -> bool:
    """Whether ``mm``'s unaligned result is better split by columns (module docstring): ``B``
    column-major with an aligned leading dimension, at least one aligned width of columns, and
    not a weight this graph computes (that one is padded in place, for free)."""
    b = mm.args[-1]
    bv = _val(b)
    if not isinstance(b, Node) or bv is None or bv.dim() != 2:
        return False
    if bv.stride(0) != 1 or bv.shape[0] <= 1 or int(bv.stride(1)) % _align(bv) != 0:
        return False
    return int(bv.shape[1]) >= _align(bv) and _weight_owner(b, bv) is None


def _split_result(gm: GraphModule, mm: Node) -> _Rewrite:
    """``mm``/``addmm`` as ``cat([op(.., B[:, :N8]), op(.., B[:, N8:])], 1)`` (bias sliced
    alike when it has N columns); users read the cat, ``mm`` is left without users."""
    args, kwargs, op = mm.args, dict(mm.kwargs), mm.target
    b = args[-1]
    bv = _val(b)
    assert isinstance(b, Node) and bv is not None
    n = int(bv.shape[1])
    n8 = n - n % _align(bv)
    added: list[Node] = []

    def cut(node: Argument, lo: int, hi: int) -> Node:
        sliced = gm.graph.call_function(aten.slice.Tensor, (node, -1, lo, hi))
        sliced.meta[SPLIT_MARK] = True  # the pipeline's next round leaves these products alone
        added.append(sliced)
        return sliced

    bias = _column_bias(mm)
    with gm.graph.inserting_before(mm):
        parts: list[Node] = []
        for lo, hi in ((0, n8), (n8, n)):
            new_args: tuple[Argument, ...] = (*args[:-1], cut(b, lo, hi))
            if bias is not None:
                new_args = (cut(bias, lo, hi), *new_args[1:])
            part = gm.graph.call_function(op, new_args, kwargs)  # type: ignore[arg-type]
            added.append(part)
            parts.append(part)
        joined = gm.graph.call_function(aten.cat.default, (parts, 1))
    added.append(joined)
    mm.replace_all_uses_with(joined)
    return _Rewrite(tuple(added), mm, joined)


def _weight_owner(b: Node, bv: torch.Tensor) -> Node | None:
    """The node W when ``b`` is exactly ``t(W)`` of a contiguous 2-D W that this graph computes
    (not an input: its storage is the caller's), else None."""
    if bv.stride(0) != 1 or bv.shape[0] <= 1 or bv.storage_offset() != 0:
        return None
    owner = _storage_owner(b)
    ov = _val(owner)
    if owner.op != "call_function" or ov is None or ov.dim() != 2 or not _static(ov):
        return None
    if not ov.is_contiguous() or tuple(ov.shape) != (bv.shape[1], bv.shape[0]) or ov.storage_offset() != 0:
        return None
    return owner


def _zero_pad_length(x: Argument, d: int, fill: float = 0.0) -> int | None:
    """The length along ``d`` of what ``x`` pads when ``x`` is a ``constant_pad_nd`` by ``fill``
    that only extends the end of ``d``; else None."""
    if not isinstance(x, Node) or overload_of(x) is not aten.constant_pad_nd.default:
        return None
    value = x.args[2] if len(x.args) > 2 else x.kwargs.get("value", 0.0)
    xv = _val(x)
    src = _val(x.args[0])
    if value != fill or xv is None or src is None:
        return None
    widths = list(x.args[1])  # type: ignore[arg-type]
    d %= xv.dim()
    before_d = 2 * (xv.dim() - 1 - d)  # constant_pad_nd's (before, after) pairs start at the last dim
    if not all(w == 0 for i, w in enumerate(widths) if i != before_d + 1):
        return None
    return int(src.shape[d])


def _cut(node: Node) -> tuple[Node, int, int, int] | None:
    """``(P, d, n, rank)`` when ``node`` is ``slice(P, d, 0, ...)`` of length ``n`` along ``d``
    (step 1) and ``P`` has ``rank`` dims."""
    if overload_of(node) is not aten.slice.Tensor or len(node.args) < 4 or node.args[2] != 0:
        return None
    p, sv = node.args[0], _val(node)
    pv = _val(p)
    if not isinstance(p, Node) or pv is None or sv is None or node.args[4:] not in ((), (1,)):
        return None
    d = int(node.args[1]) % pv.dim()  # type: ignore[arg-type]
    return p, d, int(sv.shape[d]), pv.dim()


def _zero_padded_base(node: Node, batched: bool) -> Node | None:
    """The zero-padded tensor ``node`` cuts back: ``node`` is ``slice(P, d, 0, n)`` with ``P`` a
    ``constant_pad_nd`` by zeros that only extends the end of ``d`` from ``n``; for a batched
    product's operand also ``P`` with columns from ``n`` on zero by construction: a ``bmm`` on
    a ``B`` zero-padded past column ``n`` (the result rule's), or a softmax over the last dim of
    a tensor padded with ``-inf`` past ``n`` (the operand rule's); else None."""
    cut = _cut(node)
    if cut is None:
        return None
    p, d, n, rank = cut
    sm = softmax_of(p, exclusive=False) if batched else None
    if sm is not None:
        return p if d == rank - 1 and _zero_pad_length(sm.source, d, float("-inf")) == n else None
    if overload_of(p) is aten.bmm.default:
        b = p.args[1]
        if d != 2 or not isinstance(b, Node):
            return None
        swapped = sorted(i % 3 for i in b.args[1:3] if isinstance(i, int))
        if overload_of(b) is aten.transpose.int and swapped == [1, 2]:
            return p if _zero_pad_length(b.args[0], 1) == n else None
        return p if _zero_pad_length(b, 2) == n else None
    return p if _zero_pad_length(p, d) == n else None


def _rebuilt_sizes(v: Node, src: torch.Tensor, now: torch.Tensor) -> list[int] | None:
    """The size argument of the view or expand ``v`` applied to ``now`` (its old input ``src``
    with the padded dim longer) instead of ``src``; None when the padded dim cannot be carried."""
    arg = v.args[1]
    if not isinstance(arg, list | tuple) or not all(isinstance(s, int) for s in arg):
        return None
    sizes = [int(s) for s in arg]  # type: ignore[arg-type]
    if overload_of(v) is aten.expand.default:  # sizes align with the input's dims from the right
        off = len(sizes) - now.dim()
        for i in range(now.dim()):
            if now.shape[i] != src.shape[i]:
                if src.shape[i] == 1:
                    return None
                sizes[off + i] = int(now.shape[i])
        return sizes
    # only reshapes of the leading dims: the last dim, padded or not, stays last
    if not sizes or sizes[-1] != src.shape[-1]:
        return None
    return [*sizes[:-1], int(now.shape[-1])]


def _zero_extended(gm: GraphModule, x: Node, dim: int, length: int, added: list[Node],
                   batched: bool = False) -> Node | None:
    """``x`` with ``dim`` extended by zeros to ``length``, read through ``x``'s views from the
    zero-padded tensor it slices (no copy), the new nodes appended to ``added``; None when ``x``
    is not such a view or a reshape moves the padded dim (the new nodes are then removed)."""
    chain: list[Node] = []
    node = x
    while (base := _zero_padded_base(node, batched)) is None:
        if overload_of(node) not in CHAIN_VIEWS or not isinstance(node.args[0], Node):
            return None
        chain.append(node)
        node = node.args[0]
    xv = _val(x)
    assert xv is not None
    mine: list[Node] = []
    cur = base
    for v in reversed(chain):
        src, now = _val(v.args[0]), _val(cur)
        if overload_of(v) in (aten.view.default, aten._unsafe_view.default, aten.expand.default):
            sizes = None if src is None or now is None else _rebuilt_sizes(v, src, now)
            if sizes is None:
                break
            args: tuple[Argument, ...] = (cur, sizes)
        else:
            args = (cur, *v.args[1:])
        cur = gm.graph.call_function(v.target, args, dict(v.kwargs))  # type: ignore[arg-type]
        mine.append(cur)
        try:
            refresh_meta(gm, [cur])
        except Exception:  # the view cannot take the padded dim where it now is
            break
    else:
        cv = _val(cur)
        want = [int(s) for s in xv.shape]
        want[dim] = length
        if cv is not None and [int(s) for s in cv.shape] == want:
            added += mine
            return cur
    for n in reversed(mine):
        gm.graph.erase_node(n)
    return None


def _pad_along(gm: GraphModule, x: Node, dim: int, extra: int, ndim: int) -> Node:
    """``constant_pad_nd`` of ``x`` (``ndim`` dims) by ``extra`` zeros at the end of ``dim``,
    one of its last two."""
    widths = [0, extra] if dim == ndim - 1 else [0, 0, 0, extra]
    return gm.graph.call_function(aten.constant_pad_nd.default, (x, widths, 0.0))


def _pad_inner(gm: GraphModule, mm: Node) -> _Rewrite | None:
    """``mm``/``addmm``/``bmm`` over zero-extended operands when its ``K`` or ``M`` is unaligned
    (module docstring), or None when both are aligned or nothing can be done for free where it
    must be."""
    a, b = mm.args[-2:]
    av, bv = _val(a), _val(b)
    if not isinstance(a, Node) or not isinstance(b, Node) or av is None or bv is None:
        return None
    nd = av.dim()  # the operands' row and column dims are nd - 2 and nd - 1
    if nd not in (2, 3) or bv.dim() != nd or not (_static(av) and _static(bv)):
        return None
    m, k = int(av.shape[nd - 2]), int(av.shape[nd - 1])
    align = _align(av)
    added: list[Node] = []
    with gm.graph.inserting_before(mm):
        if k % align:
            kp = k - k % align + align
            new_a = _zero_extended(gm, a, nd - 1, kp, added, nd == 3)
            if new_a is None:
                new_a = _pad_along(gm, a, nd - 1, kp - k, nd)
                added.append(new_a)
            new_b = _zero_extended(gm, b, nd - 2, kp, added, nd == 3)
            if new_b is None:
                new_b = _pad_along(gm, b, nd - 2, kp - k, nd)
                added.append(new_b)
            old = (mm, tuple(mm.args))
            mm.args = (*mm.args[:-2], new_a, new_b)
            return _Rewrite(tuple(added), mm, mm, (old,))
        bias = _val(mm.args[0]) if overload_of(mm) is aten.addmm.default else None
        if m % align == 0 or (bias is not None and bias.dim() == 2 and bias.shape[0] != 1):
            return None
        new_a = _zero_extended(gm, a, nd - 2, m - m % align + align, added, nd == 3)
        if new_a is None:
            return None
    with gm.graph.inserting_after(mm):
        rows = gm.graph.call_function(aten.slice.Tensor, (mm, nd - 2, 0, m))
    added.append(rows)
    mm.replace_all_uses_with(rows, delete_user_cb=lambda u: u is not rows)
    old = (mm, tuple(mm.args))
    mm.args = (*mm.args[:-2], new_a, b)
    return _Rewrite(tuple(added), mm, rows, (old,))


def _undo(gm: GraphModule, rw: _Rewrite) -> None:
    rw.moved_to.replace_all_uses_with(rw.moved_from)
    for src, dst in reversed(rw.also_moved):
        dst.replace_all_uses_with(src, delete_user_cb=lambda u: u not in rw.added)
    for node, args in rw.changed_args:
        node.args = args
    for node in reversed(rw.added):
        if not node.users:
            gm.graph.erase_node(node)


def _free_positions(gm: GraphModule) -> frozenset[int] | None:
    """Output positions free to change layout (module docstring); None: every position."""
    if gm.meta.get(PADDED_OUTPUTS):
        return None
    return frozenset(int(i) for i in gm.meta.get(FREE_OUTPUTS, ()))


def _free_output(gm: GraphModule, node: Node) -> bool:
    """Whether every output position holding ``node`` or a view of it is free to change layout."""
    free = _free_positions(gm)
    if free is None:
        return True
    args = _outputs(gm).args[0]
    outs = list(args) if isinstance(args, list | tuple) else [args]
    todo, seen = [node], {node}
    while todo:
        n = todo.pop()
        if any(a is n and i not in free for i, a in enumerate(outs)):
            return False
        for u in n.users:
            if overload_of(u) in _VIEWS and u not in seen:
                seen.add(u)
                todo.append(u)
    return True


def _keep_output_strides(gm: GraphModule, before: dict[Node, tuple[int, ...]]) -> bool:
    """Clone outputs whose strides changed back to contiguous at the positions not free to
    change layout; False when one of those was not contiguous."""
    out = _outputs(gm)
    free = _free_positions(gm)
    if free is None:
        return True
    args = out.args[0]
    outs = list(args) if isinstance(args, list | tuple) else [args]
    now = _output_strides(gm)
    changed = {a for a in now if a in before and now[a] != before[a]}
    fixed = [i for i, a in enumerate(outs) if isinstance(a, Node) and a in changed and i not in free]
    for i in fixed:
        a = outs[i]
        assert isinstance(a, Node)
        v = _val(a)
        assert v is not None
        if before[a] != _contiguous_strides(tuple(int(d) for d in v.shape)):
            return False
    clones: dict[Node, Node] = {}
    for i in fixed:
        a = outs[i]
        assert isinstance(a, Node)
        if a not in clones:
            with gm.graph.inserting_before(out):
                clones[a] = gm.graph.call_function(aten.clone.default, (a,),
                                                   {"memory_format": torch.contiguous_format})
            refresh_meta(gm, [clones[a]])
        outs[i] = clones[a]
    if fixed:
        out.args = (tuple(outs) if isinstance(args, tuple) else outs if isinstance(args, list) else outs[0],)
    return True


def _try(gm: GraphModule, make: _Rewrite, before: dict[Node, tuple[int, ...]]) -> bool:
    touched = [*make.added, *make.moved_to.users, *(n for n, _ in make.changed_args),
               *(u for _, dst in make.also_moved for u in dst.users)]
    try:
        refresh_meta(gm, touched)
        if _keep_output_strides(gm, before):
            return True
    except Exception:  # a view that cannot take the new strides: leave this product alone
        pass
    users = [*make.moved_to.users, *(u for _, dst in make.also_moved for u in dst.users if u not in make.added)]
    _undo(gm, make)
    refresh_meta(gm, [*users, *(n for n, _ in make.changed_args)])
    return False


def pad_matmul_strides_for(gm: GraphModule, devices: Collection[str] = ("cuda",),
                           min_work: int = MIN_WORK) -> bool:
    """The pass, on products on ``devices`` with at least ``min_work`` multiply-adds.

    Returns whether the graph changed. Values, shapes and graph outputs' strides are unchanged.
    """
    if fake_mode_of(gm) is None:
        return False
    changed = False
    existing = set(gm.graph.nodes)
    for mm in list(gm.graph.nodes):
        if overload_of(mm) not in _MATMULS:
            continue
        out = _val(mm)
        a, b = (_val(x) for x in mm.args[-2:])
        if out is None or a is None or b is None or out.device.type not in devices:
            continue
        if out.dtype not in _FLOATS or not all(_static(t) for t in (out, a, b)):
            continue
        batch = int(a.shape[0]) if a.dim() == 3 else 1
        if batch * int(a.shape[-2]) * int(a.shape[-1]) * int(b.shape[-1]) < min_work:
            continue
        if isinstance(mm.args[-1], Node) and mm.args[-1].meta.get(SPLIT_MARK):
            continue  # a part of a split product: its few unaligned columns stay as they are
        before = _output_strides(gm)
        # a batched result that must stay a contiguous output is not padded: it has no split,
        # and a contiguous copy of a whole result costs about what the aligned kernel saves
        kept = out.dim() == 3 and _aliased_by_output(mm) and not _free_output(gm, mm)
        if _unaligned(out) and out.is_contiguous() and not kept:
            splittable = _splittable(mm)
            # split where the result must stay contiguous; else pad, and split where a view
            # cannot take the padded rows
            split = splittable and _aliased_by_output(mm) and not _free_output(gm, mm)
            done = not split and _try(gm, _pad_result(gm, mm), before)
            if not done and splittable:
                split = done = _try(gm, _split_result(gm, mm), before)
            if done and split:
                gm.graph.erase_node(mm)  # its users read the cat now
            changed |= done
            continue
        for operand in mm.args[-2:]:
            ov = _val(operand)
            if not isinstance(operand, Node) or ov is None or not _unaligned(ov):
                continue
            owner = _storage_owner(operand)
            v = _val(owner)
            if owner.op not in ("call_function", "placeholder") or _aliased_by_output(owner):
                continue
            if v is None or not v.is_contiguous() or not _static(v) or int(v.shape[-1]) % _align(v) == 0:
                continue
            before = _output_strides(gm)
            sm = softmax_of(owner) if out.dim() == 3 else None
            padded = _pad_source(gm, owner) if sm is None else _pad_softmax(gm, owner, sm)
            changed |= _try(gm, padded, before)
        inner = _pad_inner(gm, mm)
        if inner is not None:
            changed |= _try(gm, inner, _output_strides(gm))
    for pad in [n for n in gm.graph.nodes if n not in existing]:
        if overload_of(pad) is aten.constant_pad_nd.default:
            absorb_pad(gm, pad, lambda t: not _aliased_by_output(t))
    return changed


@graph_pass("pad_matmul_strides", stages=frozenset({Stage.POST_GRAD}))
def pad_matmul_strides(gm: GraphModule) -> PassResult:
    """Pad unaligned matmul rows to 16 bytes on CUDA so cuBLAS takes its tensor-core kernels.

    Stage: post-grad (functional ATen graphs with ``meta["val"]``).

    Args:
        gm: the graph; products (``mm``, ``addmm``, ``bmm``) on CUDA tensors of at least
            :data:`MIN_WORK` multiply-adds are considered. ``COIL_PAD_MM=0`` turns it off.

    Returns:
        ``PassResult(gm, modified)``; values and shapes unchanged, strides of intermediates may
        change, graph outputs keep theirs.

    Example::

        before: o = mm(x, t(w))          # o: bf16[2048, 50257], rows of 100514 bytes; w an input
        after:  o = cat([mm(x, slice(t(w), -1, 0, 50256)), mm(x, slice(t(w), -1, 50256, 50257))], 1)
        before: o = mm(x, b)             # b: bf16[768, 50257], row-major
        after:  o = slice(mm(x, constant_pad_nd(b, [0, 7])), 1, 0, 50257)   # rows of 100528 bytes
        before: s = bmm(q, t(k)); p = softmax(s + bias); o = bmm(p, v)   # bf16[B, 49, 32] each
        after:  s = slice(bmm(q, t(constant_pad_nd(k, [0, 0, 0, 7]))), 2, 0, 49)
                p = softmax(constant_pad_nd(s + bias, [0, 7], -inf))      # [B, 49, 56], zeros past 49
                o = bmm(p, constant_pad_nd(v, [0, 0, 0, 7]))              # K = 56

    Soundness: zero columns of B (and bias) only add result columns that are sliced away; a
    padded copy read through ``[..., :N]`` holds the same values as the original; each column
    of a split product is the same dot product over K as before; zeros appended to both
    operands along K add nothing; a softmax over ``-inf`` padding is the same softmax followed by
    zeros. Columns past ``N`` of a padded product are zeros except in a row of A that is not
    finite, where the result's row is not finite either (an infinity may then read as NaN in a
    product over that row). Every rewrite
    is checked by fake propagation of all users and undone when a view rejects the new strides;
    outputs whose strides would change become contiguous clones.
    """
    if not knobs.pad_mm:
        return PassResult(gm, False)
    return PassResult(gm, pad_matmul_strides_for(gm))
