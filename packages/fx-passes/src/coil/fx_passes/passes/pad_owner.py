"""A pad of a tensor that other nodes also read, moved onto the tensor's own buffer.

``constant_pad_nd(x, ...)`` extends one dim of ``x`` at its end. When ``x`` (through views) is
a tensor ``T`` this graph computes and something else reads ``T`` too (in a backward, the
copy that splits a gradient's heads, read by two products), ``T`` is materialised and the pad
copies it into a second buffer: one kernel and one buffer more. Rewritten, ``T`` is computed
straight into its padded buffer ``P = constant_pad_nd(T, ...)`` along the matching dim of
``T``, every other reader of ``T`` reads the slice ``P[..., :n]`` (same values, one stride
longer), and the pad's result is ``P`` read through ``x``'s views. ``T``'s only reader is then
the pad, which the scheduler fuses into ``T``'s producer: one kernel writes the padded buffer.

Rules, so that nothing a reader sees changes: ``T`` owns its storage (a computed, contiguous,
static tensor, not a view, not a softmax's result: :mod:`.softmax_rows` pads a softmax
itself, and a pad after it would split its kernel), the caller allows it (:mod:`.pad_mm`: no
graph output is or views ``T``), each view between ``T`` and ``x`` carries the padded dim (a
transpose or permute moves it, a reshape keeps it whole, an expand broadcasts nothing), and the
rebuilt result has the pad's shape and strides. A rewrite that fake propagation rejects is
undone.
"""

from __future__ import annotations

from collections.abc import Callable
from math import prod

import torch
from coil.fx_passes.fake_meta import refresh_meta
from coil.fx_passes.ops import overload_of
from coil.fx_passes.passes.softmax_rows import softmax_of
from torch.fx import GraphModule, Node
from torch.fx.node import Argument

__all__ = ["CHAIN_VIEWS", "absorb_pad"]

aten = torch.ops.aten

# the views a pad is followed back through (pad_mm's zero-extended operands follow the same)
CHAIN_VIEWS = frozenset({aten.view.default, aten._unsafe_view.default, aten.t.default,
                         aten.transpose.int, aten.permute.default, aten.expand.default})
_RESHAPES = (aten.view.default, aten._unsafe_view.default, aten.expand.default)


def _val(node: object) -> torch.Tensor | None:
    v = node.meta.get("val") if isinstance(node, Node) else None
    return v if isinstance(v, torch.Tensor) else None


def _ints(arg: Argument) -> list[int] | None:
    """``arg`` as a list of ints (a dim list, a size list), None when it is anything else."""
    items = list(arg) if isinstance(arg, list | tuple) else [arg]
    return [i for i in items if isinstance(i, int)] if all(isinstance(i, int) for i in items) else None


def _padded_dim(pad: Node) -> tuple[int, int] | None:
    """``(d, extra)`` when ``pad`` only extends the end of dim ``d`` by ``extra`` elements."""
    x, widths = pad.args[0], pad.args[1]
    xv = _val(x)
    if xv is None or not isinstance(widths, list | tuple) or len(widths) % 2:
        return None
    ends = [(i, w) for i, w in enumerate(widths) if w != 0]
    if len(ends) != 1 or ends[0][0] % 2 == 0 or not isinstance(ends[0][1], int) or ends[0][1] < 0:
        return None
    return xv.dim() - 1 - ends[0][0] // 2, ends[0][1]


def _input_dim(view: Node, d: int) -> int | None:
    """The dim of ``view``'s input that its result's dim ``d`` is (None: a reshape cuts it, an
    expand broadcasts)."""
    op, src, out = overload_of(view), _val(view.args[0]), _val(view)
    if src is None or out is None:
        return None
    if op is aten.t.default:
        return d if src.dim() < 2 else 1 - d
    if op is aten.transpose.int:
        dims = _ints(view.args[1:3])
        if dims is None:
            return None
        a, b = (i % src.dim() for i in dims)
        return b if d == a else a if d == b else d
    if op is aten.permute.default:
        dims = _ints(view.args[1])
        return None if dims is None else dims[d] % src.dim()
    if op is aten.expand.default:  # only one that broadcasts nothing (matmul's tracing adds it)
        return d if src.shape == out.shape else None
    before = prod(int(s) for s in out.shape[:d])  # a reshape keeps the dim if it starts alike
    for i in range(src.dim()):
        if int(src.shape[i]) == int(out.shape[d]) and prod(int(s) for s in src.shape[:i]) == before:
            return i
    return None


def _rebuilt(gm: GraphModule, view: Node, base: Node, d_out: int, length: int) -> Node:
    """``view`` applied to ``base`` (its input with one dim longer), its result's ``d_out``
    now ``length`` long."""
    args: tuple[Argument, ...] = (base, *view.args[1:])
    sizes = _ints(view.args[1]) if overload_of(view) in _RESHAPES else None
    if sizes is not None:
        sizes[d_out] = length
        args = (base, sizes)
    return gm.graph.call_function(view.target, args, dict(view.kwargs))  # type: ignore[arg-type]


def _owns_storage(node: Node) -> bool:
    v = _val(node)
    op = overload_of(node)
    if op is None or v is None or not v.is_contiguous() or v.storage_offset() != 0:
        return False
    if not all(isinstance(s, int) for s in (*v.shape, *v.stride())):
        return False
    return all(r.alias_info is None for r in op._schema.returns)


def absorb_pad(gm: GraphModule, pad: Node, allowed: Callable[[Node], bool]) -> bool:
    """Move ``pad`` onto the buffer of the tensor ``T`` it pads (module docstring); returns
    whether the graph changed. ``allowed(T)``: whether ``T``'s readers may read a slice of its
    padded buffer in its place."""
    if overload_of(pad) is not aten.constant_pad_nd.default or _val(pad) is None:
        return False
    found = _padded_dim(pad)
    if found is None:
        return False
    d, extra = found
    chain: list[tuple[Node, int]] = []  # (view, the padded dim of its result), from the pad back
    node = pad.args[0]
    assert isinstance(node, Node)
    while overload_of(node) in CHAIN_VIEWS and isinstance(node.args[0], Node):
        below = _input_dim(node, d)
        if below is None:
            return False
        chain.append((node, d))
        node, d = node.args[0], below
    owner = node
    ov = _val(owner)
    on_path = {v for v, _ in chain}
    if ov is None or not _owns_storage(owner) or not allowed(owner):
        return False
    if softmax_of(owner, exclusive=False) is not None:  # a pad of a softmax's result would split its kernel
        return False  # (:mod:`.softmax_rows` pads the softmax itself)
    if all(u in on_path or u is pad for n in (owner, *on_path) for u in n.users):
        return False  # the pad is its only reader: the scheduler fuses it already
    n = int(ov.shape[d])
    widths = [0] * (2 * (ov.dim() - d))  # (before, after) pairs from the last dim
    widths[-1] = extra
    value = pad.args[2] if len(pad.args) > 2 else pad.kwargs.get("value", 0.0)
    with gm.graph.inserting_after(owner):
        padded = gm.graph.call_function(aten.constant_pad_nd.default, (owner, widths, value))
    with gm.graph.inserting_after(padded):
        rows = gm.graph.call_function(aten.slice.Tensor, (padded, d, 0, n))
    added = [padded, rows]
    cur = padded
    for view, d_out in reversed(chain):
        with gm.graph.inserting_after(cur):
            cur = _rebuilt(gm, view, cur, d_out, int(_val(view).shape[d_out]) + extra)  # type: ignore[union-attr]
        added.append(cur)
    pv = _val(pad)
    assert pv is not None
    try:
        refresh_meta(gm, added)
        cv = _val(cur)
        same = cv is not None and cv.shape == pv.shape and cv.stride() == pv.stride()
    except Exception:  # a view that cannot take the longer dim
        same = False
    if not same:
        for a in reversed(added):
            gm.graph.erase_node(a)
        return False
    owner.replace_all_uses_with(rows, delete_user_cb=lambda u: u is not padded)
    pad.replace_all_uses_with(cur)
    readers = [*rows.users, *cur.users]
    try:
        refresh_meta(gm, readers)
    except Exception:  # a reader's view cannot take the slice's strides: undo
        rows.replace_all_uses_with(owner)
        cur.replace_all_uses_with(pad)
        for a in reversed(added):
            gm.graph.erase_node(a)
        refresh_meta(gm, readers)
        return False
    gm.graph.erase_node(pad)
    for view, _ in chain:  # the old views, left without readers
        if not view.users:
            gm.graph.erase_node(view)
    return True
