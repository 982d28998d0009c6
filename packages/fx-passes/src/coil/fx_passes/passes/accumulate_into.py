"""An accumulating ``index_put`` into zeros, then added to a tensor, accumulates into that tensor.

A tied embedding's weight gradient (GPT-2's ``wte``, BERT's word embeddings) is the sum of two
parts: the output projection's ``mm`` and ``embedding_dense_backward``, which decomposes to

    g = index_put(zeros([V, D]), [ids], grad_rows, accumulate=True);  w_grad = add(mm_grad, g)

That is three ``[V, D]`` buffers live at once at the end of the backward (GPT-2: 3 x 147 MiB
in fp32), a fill, an atomic scatter and an add. Accumulating straight into the addend,

    w_grad = index_put(mm_grad, [ids], grad_rows, accumulate=True)

is one copy and the same atomic scatter, and two buffers (one when the wrapper scatters in
place into an addend that dies there).
"""

from __future__ import annotations

import torch
from coil.fx_passes.fake_meta import compute_val, describe_mismatch, fake_mode_of, refresh_meta
from coil.fx_passes.infra import PassResult, Stage, graph_pass
from coil.fx_passes.ops import overload_of
from coil.fx_passes.passes.constant_fold import uniform_value
from torch.fx import GraphModule, Node

__all__ = ["accumulate_into_addend"]

aten = torch.ops.aten

_INDEX_PUTS = frozenset({aten.index_put.default, aten._unsafe_index_put.default})


def _val(node: object) -> torch.Tensor | None:
    v = node.meta.get("val") if isinstance(node, Node) else None
    return v if isinstance(v, torch.Tensor) else None


def _accumulating_put_into_zeros(node: object) -> bool:
    """``node`` is ``index_put(zeros, indices, values, accumulate=True)`` read by one node."""
    if not isinstance(node, Node) or overload_of(node) not in _INDEX_PUTS or len(node.users) != 1:
        return False
    args = (*node.args, *[node.kwargs[k] for k in ("accumulate",) if k in node.kwargs])
    if len(args) != 4 or args[3] is not True:
        return False
    base = args[0]
    return isinstance(base, Node) and uniform_value(base) == 0


def _rewrite(gm: GraphModule, add: Node) -> bool:
    if overload_of(add) is not aten.add.Tensor or len(add.args) != 2 or add.kwargs.get("alpha", 1) != 1:
        return False
    if set(add.kwargs) - {"alpha"}:
        return False
    a, b = add.args
    put, addend = (b, a) if _accumulating_put_into_zeros(b) else (a, b)
    if not _accumulating_put_into_zeros(put) or not isinstance(addend, Node) or put is addend:
        return False
    assert isinstance(put, Node)
    out, pv, av = _val(add), _val(put), _val(addend)
    if out is None or pv is None or av is None:
        return False
    # no broadcasting, promotion or layout change: the addend is exactly what the sum looks like
    if describe_mismatch(out, av) is not None or describe_mismatch(out, pv) is not None:
        return False
    fake_mode = fake_mode_of(gm)
    assert fake_mode is not None
    _, indices, values = put.args[:3]
    with gm.graph.inserting_before(add):
        new = gm.graph.call_function(overload_of(put), (addend, indices, values, True))  # type: ignore[arg-type]
    new.meta.update(add.meta)
    new.meta["val"] = compute_val(new, fake_mode)
    if describe_mismatch(out, new.meta["val"]) is not None:
        gm.graph.erase_node(new)
        return False
    users = list(add.users)
    add.replace_all_uses_with(new)
    gm.graph.erase_node(add)
    gm.graph.erase_node(put)
    refresh_meta(gm, users)
    return True


@graph_pass("accumulate_into_addend", stages=frozenset({Stage.JOINT, Stage.POST_GRAD}))
def accumulate_into_addend(gm: GraphModule) -> PassResult:
    """Rewrite ``add(a, index_put(zeros, idx, v, accumulate=True))`` as ``index_put(a, idx, v, True)``.

    Stage: joint, post-grad.

    Args:
        gm: the graph module, edited in place.

    Returns:
        ``PassResult(gm, modified)``. The zeros left unused are removed by DCE.

    Example::

        before: z = full([V, D], 0); g = index_put(z, [ids], rows, True); w = add(mm, g)
        after:  w = index_put(mm, [ids], rows, True)

    Soundness: with ``accumulate``, ``index_put(base, idx, v)[q] = base[q] + sum of v[k] over
    the k with target q`` (duplicates add up), so over zeros it is that sum alone, and adding
    ``a`` gives ``a[q] + sum``: the same as accumulating into ``a``. The pass fires only when
    the zeros are a uniform constant 0 (``full``/``zeros`` and their ``_like`` forms), the
    ``index_put`` has no other reader, ``add`` has no ``alpha`` other than 1, and ``a``, the
    ``index_put`` and the sum agree in shape, strides, dtype and device (no broadcasting, no
    type promotion). Rounding: eager adds the scattered rows together, then ``a``; here each
    row is added onto ``a`` in turn (the order of atomic additions is unspecified in both).
    """
    modified = False
    for node in list(gm.graph.nodes):
        if node.op == "call_function" and _rewrite(gm, node):
            modified = True
    return PassResult(gm, modified)
