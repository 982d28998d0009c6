"""Matrix-product operands copied in their source's inner order (a copy without a transpose).

A batched product's operand that is not viewable as one batch of matrices (a key transposed
for ``q @ kᵀ`` after a head split, say) is materialised by a ``clone`` in row-major order.
When the source runs contiguously along its rows' dim instead (``stride(-2) == 1``), that copy
is a transpose: its loads or its stores are strided, and such a kernel runs several times
slower than a copy (Swin-T's window attention, T5's ``matmul(q, k.transpose(3, 2))``).

cuBLAS takes column-major operands as readily as row-major ones, so the copy may keep the
source's order: ``clone(x)`` becomes ``transpose(clone(transpose(x, -2, -1)), -2, -1)`` — a
copy contiguous on both sides whose last two dims are column-major. Rewritten only when:

* every use of the copy is an operand of ``mm``/``bmm``/``addmm``/``baddbmm``, directly or
  through views (the matmul decomposition's batch reshapes, the transposes a backward reads),
  or an output free to change layout (``gm.meta[FREE_OUTPUTS]``: an activation the forward
  saves for a backward that adopts its strides), so no other reader sees the new strides;
* the new leading dimension is 16-byte aligned (or the old one was not either): an unaligned
  operand makes cuBLAS pick its ``align1`` kernels, dearer than the strided copy;
* every view still is a view of the new layout, and every operand that cuBLAS took as it was
  (row- or column-major, aligned) still is one (checked after fake propagation; else undone).
"""

from __future__ import annotations

import torch
from coil.fx_passes.fake_meta import compute_val, fake_mode_of, refresh_meta, users_to_refresh
from coil.fx_passes.infra import PassResult, Stage, graph_pass
from coil.fx_passes.ops import overload_of
from coil.fx_passes.passes.channels_last import FREE_OUTPUTS
from torch.fx import GraphModule, Node

__all__ = ["operand_copies_in_source_order"]

aten = torch.ops.aten
# views a copy's layout shows through (reshapes of the batch dims, transposes)
_VIEWS = frozenset({
    aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.permute.default, aten.transpose.int,
    aten.t.default, aten.unsqueeze.default, aten.squeeze.dim, aten.expand.default,
})
# the operand positions of each product
_PRODUCTS: dict[object, tuple[int, ...]] = {
    aten.mm.default: (0, 1), aten.bmm.default: (0, 1), aten.addmm.default: (1, 2), aten.baddbmm.default: (1, 2),
}
ALIGN_BYTES = 16


def _val(node: object) -> torch.Tensor | None:
    v = node.meta.get("val") if isinstance(node, Node) else None
    return v if isinstance(v, torch.Tensor) else None


def _free_outputs(gm: GraphModule) -> frozenset[int]:
    return frozenset(int(i) for i in gm.meta.get(FREE_OUTPUTS, ()))


def _reads(node: Node, free: frozenset[int], operands: list[Node]) -> bool:
    """Whether every use of ``node`` is a product operand, directly or through views (each
    operand node is appended to ``operands``), or an output free to change layout (``free``:
    an activation saved for the backward). A node without users fails: nothing to gain."""
    if not node.users:
        return False
    for user in node.users:
        op = overload_of(user)
        if user.op == "output":
            outs = user.args[0]
            if not isinstance(outs, list | tuple) or any(a is node and i not in free for i, a in enumerate(outs)):
                return False
        elif op in _VIEWS:
            if user.args[0] is not node or not _reads(user, free, operands):
                return False
        elif op in _PRODUCTS:
            if any(a is node for i, a in enumerate(user.args) if i not in _PRODUCTS[op]) or user.kwargs:
                return False
            operands.append(node)
        else:
            return False
    return True


def _blas_ready(t: torch.Tensor) -> bool:
    """A product operand cuBLAS takes as it is: its last two dims row- or column-major with a
    16-byte-aligned leading dimension (batch dims aside)."""
    if t.dim() < 2:
        return False
    rows, cols = _static_int(t.shape[-2]), _static_int(t.shape[-1])
    s2, s1 = _static_int(t.stride(-2)), _static_int(t.stride(-1))
    if None in (rows, cols, s2, s1):
        return False
    assert rows is not None and cols is not None and s2 is not None and s1 is not None
    align = max(1, ALIGN_BYTES // t.element_size())
    if s1 == 1 or cols == 1:
        return s2 >= cols and (s2 % align == 0 or rows == 1)
    if s2 == 1 or rows == 1:
        return s1 >= rows and (s1 % align == 0 or cols == 1)
    return False


def _static_int(x: object) -> int | None:
    return int(x) if isinstance(x, int) else None


def _worth_it(src: torch.Tensor) -> bool:
    """The source runs along its rows' dim, and the column-major copy's leading dim is aligned
    whenever the row-major one is."""
    if src.dim() < 2 or src.dtype.is_complex:
        return False
    s2, s1 = _static_int(src.stride(-2)), _static_int(src.stride(-1))
    rows, cols = _static_int(src.shape[-2]), _static_int(src.shape[-1])
    if None in (s2, s1, rows, cols) or s2 != 1 or s1 == 1 or rows == 1 or cols == 1:  # type: ignore[comparison-overlap]
        return False
    align = max(1, ALIGN_BYTES // src.element_size())
    assert rows is not None and cols is not None
    return rows % align == 0 or cols % align != 0


def _rewrite(gm: GraphModule, clone: Node) -> bool:
    src = clone.args[0] if clone.args else None
    sv, cv = _val(src), _val(clone)
    if not isinstance(src, Node) or sv is None or cv is None or not _worth_it(sv):
        return False
    if clone.kwargs.get("memory_format", torch.preserve_format) not in (torch.contiguous_format, torch.preserve_format):
        return False
    operands: list[Node] = []
    if not cv.is_contiguous() or not _reads(clone, _free_outputs(gm), operands):
        return False
    before = [n for n in operands if (v := _val(n)) is not None and _blas_ready(v)]
    fake_mode = fake_mode_of(gm)
    assert fake_mode is not None
    graph = gm.graph
    with graph.inserting_before(clone):
        flipped = graph.call_function(aten.transpose.int, (src, -2, -1))
        copy = graph.call_function(aten.clone.default, (flipped,), {"memory_format": torch.contiguous_format})
        back = graph.call_function(aten.transpose.int, (copy, -2, -1))
    added = (flipped, copy, back)
    for n in added:
        n.meta = {**clone.meta, "val": compute_val(n, fake_mode)}
    users = list(clone.users)
    clone.replace_all_uses_with(back)
    try:
        refresh_meta(gm, users_to_refresh(users, cv, back.meta["val"]))
        # every operand cuBLAS took as it was still is one (a view may now be neither row- nor
        # column-major, or its leading dimension unaligned)
        ok = all((v := _val(n)) is not None and _blas_ready(v) for n in before)
    except Exception:  # a reshape that is no view of the new layout
        ok = False
    if not ok:
        back.replace_all_uses_with(clone)
        for n in reversed(added):
            graph.erase_node(n)
        refresh_meta(gm, users)
        return False
    graph.erase_node(clone)
    return True


@graph_pass("operand_copies_in_source_order", stages=frozenset({Stage.POST_GRAD}))
def operand_copies_in_source_order(gm: GraphModule) -> PassResult:
    """Copies that only feed matrix products keep their source's inner order (module docstring).

    Stage: post-grad.

    Args:
        gm: the graph module, edited in place.

    Returns:
        ``PassResult(gm, modified)``.

    Example::

        before: c = clone(permute(k, [0, 1, 3, 2])); s = bmm(q, view(c, [B*H, D, S]))
        after:  c = transpose(clone(transpose(permute(k, [0, 1, 3, 2]), -2, -1)), -2, -1); the same bmm

    Soundness: the copy holds the same values; only its strides differ (column-major in the
    last two dims), and only products, which take either layout, and outputs free to change
    layout read it. Every reshape of it is re-propagated; one that is no view of the new
    layout undoes the rewrite.
    """
    modified = False
    for node in list(gm.graph.nodes):
        if node.op == "call_function" and overload_of(node) is aten.clone.default and _rewrite(gm, node):
            modified = True
    return PassResult(gm, modified)
