"""attention_to_op (pre-grad): attention as models write it becomes one call of an attention op.

The op is the caller's (fx-passes depends on torch alone): coil's backend passes
``torch.ops.coil.attention.default``, whose schema is

    (Tensor q, Tensor k, Tensor v, Tensor? bias, Tensor? keep, Tensor? alibi, float scale,
     bool causal, SymInt window, float softcap) -> (Tensor out, Tensor lse)

and whose meaning is docs/contracts.md's (scores ``scale * q·kᵀ`` over key/value head
``h // (H // Hkv)``, softcapped, plus ALiBi and bias, masked where ``keep`` is false, above the
diagonal when causal and below the band when ``window`` > 0; softmax; times v). The recognisers
are in :mod:`~coil.fx_passes.passes.attention_forms` and :mod:`~coil.fx_passes.passes.alibi`.
"""

from __future__ import annotations

import heapq
import operator
from typing import Any

import torch
from coil.fx_passes.fake_meta import describe_mismatch
from coil.fx_passes.infra import GraphPass, PassResult, Stage
from coil.fx_passes.ops import is_mutating
from coil.fx_passes.passes.alibi import alibi_slopes
from coil.fx_passes.passes.attention_forms import Attention, eager_chain, kind_of, sdpa_call
from coil.fx_passes.passes.causal_mask import (
    VALUE_KEYS,
    MaskForm,
    mask_form,
    static_value,
    value_of,
)
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.fx import GraphModule, Node

__all__ = ["ATTENTION_MODES", "attention_to_op", "fold_static_masks"]

ATTENTION_MODES = ("always", "auto")


def attention_to_op(op: Any, mode: str = "always") -> GraphPass:
    """The pre-grad pass ``attention_to_op`` rewriting attention into calls of ``op``.

    Args:
        op: an operator with the module's schema (``torch.ops.coil.attention.default``).
        mode: "always" rewrites every recognised form; "auto" only those SDPA cannot hand to
            its flash kernel (:meth:`~coil.fx_passes.passes.attention_forms.Attention.needs_op`).

    Raises:
        ValueError: an unknown mode.
    """
    if mode not in ATTENTION_MODES:
        raise ValueError(f"attention_to_op: mode {mode!r}, expected one of {', '.join(ATTENTION_MODES)}")

    def attention_to_op_pass(gm: GraphModule) -> PassResult:
        """Rewrite SDPA calls and eager softmax chains into one call of an attention op.

        Stage: pre-grad (Dynamo's torch IR), so that AOTAutograd traces the op's forward and its
        registered backward, and the chain's scores and probabilities are never saved.

        Recognised (each detail checked; anything else stays as it was):
        ``scaled_dot_product_attention(q, k, v, attn_mask, dropout_p=0, is_causal, scale,
        enable_gqa)`` (a bool mask keeps, a float mask is a bias, scale defaults to 1/sqrt(D));
        ``matmul(q, kᵀ) [* s | / s]... [tanh(x / c) * c] [+ bias | masked_fill(m, -inf)]... ->
        softmax(-1) -> [dropout of p=0 or not training] -> matmul(., v)`` with dtype casts
        between, every intermediate used once. k and v widened by ``repeat_kv`` or
        ``repeat_interleave`` are passed un-widened. Masks and biases computed from sizes
        alone are evaluated: nothing masked -> dropped, the causal mask -> causal, a causal band
        -> causal + window; an ALiBi bias (:mod:`~coil.fx_passes.passes.alibi`) -> alibi +
        causal.

        Args:
            gm: a torch-IR graph module whose nodes carry FakeTensor values (Dynamo's
                ``example_value`` or ``val``); edited in place.

        Returns:
            ``PassResult(gm, modified)``; modified when a call was rewritten.

        Example::

            before: w = matmul(q, k.transpose(2, 3)) * 0.125 + mask
                    out = matmul(softmax(w, dim=-1, dtype=float32).to(q.dtype), v)
            after:  a = op(q, k, v, mask, None, None, 0.125, False, 0, 0.0); out = a[0]

        Soundness: q, k, v are 4-D of one float dtype and device, D static and at most 256,
        heads dividing; the result has the replaced node's shape and dtype (its strides are
        the op's, contiguous, and the users' values are re-derived). A dropout that may drop,
        a chain value read elsewhere (returned attention weights), a mask that masks by a
        finite fill, or a scale that is not a constant leaves the form alone. Two differences
        from the eager chain: the op accumulates scores in float32 where a half-precision chain
        rounds them, and a row whose every key is masked by -inf is 0 where softmax gives NaN.
        """
        return _rewrite(gm, op, mode)

    return GraphPass("attention_to_op", attention_to_op_pass, frozenset({Stage.PRE_GRAD}))


def _rewrite(gm: GraphModule, op: Any, mode: str) -> PassResult:
    cache: dict[Node, Any] = {}
    taken: set[Node] = set()
    found: list[Attention] = []
    for node in list(gm.graph.nodes):
        kind = kind_of(node)
        att = sdpa_call(node) if kind == "sdpa" else eager_chain(node, cache) if kind == "matmul" else None
        if att is None or not isinstance(value_of(att.q), FakeTensor):
            continue
        nodes = {att.anchor, *att.chain}
        if nodes & taken:
            continue
        fold_static_masks(att, cache)
        if mode == "auto" and not att.needs_op():
            continue
        taken |= nodes
        found.append(att)
    for att in found:
        _replace(gm, att, op)
    if found:
        gm.recompile()  # masks left unused go with the pipeline's dead-code pass
    return PassResult(gm, bool(found))


def _combine(forms: list[MaskForm]) -> MaskForm:
    """The form keeping what every one of ``forms`` keeps (causal bands intersect)."""
    causal = any(f.causal for f in forms)
    windows = [f.window for f in forms if f.window > 0]
    return MaskForm(causal, min(windows) if windows else 0)


def fold_static_masks(att: Attention, cache: dict[Node, Any]) -> None:
    """Masks and biases of ``att`` computed from sizes alone become flags: one of a
    :class:`~coil.fx_passes.passes.causal_mask.MaskForm` (nothing masked, causal, a causal
    band) is dropped for ``causal``/``window``; an ALiBi bias becomes ``alibi`` (its slopes)
    and ``causal``. Others stay tensors. Needs static query and key lengths."""
    qv, kv = value_of(att.q), value_of(att.k)
    assert qv is not None and kv is not None
    length, source = qv.shape[2], kv.shape[2]
    if not isinstance(length, int) or not isinstance(source, int):
        return
    forms = [MaskForm(att.causal, att.window)]

    def folded(node: Node, negate: bool) -> bool:
        value = static_value(node, cache)
        form = None if value is None else mask_form(~value if negate else value, length, source)
        if form is not None:
            forms.append(form)
        return form is not None

    att.keeps = [m for m in att.keeps if not folded(m, False)]
    att.drops = [m for m in att.drops if not folded(m, True)]
    att.biases = [b for b in att.biases if not folded(b, False)]
    for b in att.biases:
        slopes = alibi_slopes(b, qv, length, source, cache)
        if slopes is not None:
            att.alibi = slopes
            forms.append(MaskForm(True))
            att.biases = [x for x in att.biases if x is not b]
            break
    form = _combine(forms)
    att.causal, att.window = form.causal, form.window


def _stored(node: object) -> Any:
    if not isinstance(node, Node):
        return node
    return node.meta.get("example_value", node.meta.get("val"))


def _compute(node: Node, fake: FakeTensorMode) -> Any:
    """``node`` run on its inputs' stored values under ``fake``."""
    args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), _stored)
    with fake:
        if node.op == "call_method":
            self_, *rest = args
            return getattr(self_, str(node.target))(*rest, **kwargs)
        assert callable(node.target)
        return node.target(*args, **kwargs)


def _replace(gm: GraphModule, att: Attention, op: Any) -> None:
    """Insert the op call before ``att.anchor``, give its ``out`` to the anchor's users and
    erase the anchor and its chain."""
    graph = gm.graph
    fake = value_of(att.q).fake_mode  # type: ignore[union-attr]
    keys = [k for k in VALUE_KEYS if k in att.anchor.meta] or ["example_value"]
    copied: dict[str, Any] = {k: att.anchor.meta[k] for k in ("stack_trace", "nn_module_stack")
                              if k in att.anchor.meta}

    def add(kind: str, target: Any, *args: Any) -> Node:
        node = graph.create_node(kind, target, args)
        value = _compute(node, fake)
        node.meta.update({**copied, **dict.fromkeys(keys, value)})
        return node

    def four_d(node: Node | None) -> Node | None:
        if node is None or _stored(node).dim() == 4:
            return node
        return add("call_function", operator.getitem, node, (None,) * (4 - _stored(node).dim()) + (Ellipsis,))

    def folded(nodes: list[Node], target: Any) -> Node | None:
        out = nodes[0] if nodes else None
        for n in nodes[1:]:
            out = add("call_function", target, out, n)
        return out

    with graph.inserting_before(att.anchor):
        bias = four_d(folded(att.biases, operator.add))
        drops = [add("call_function", torch.logical_not, d) for d in att.drops]
        keep = four_d(folded([*att.keeps, *drops], torch.logical_and))
        alibi = att.alibi
        if alibi is not None and _stored(alibi).dtype != torch.float32:
            alibi = add("call_method", "float", alibi)
        call = add("call_function", op, att.q, att.k, att.v, bias, keep, alibi, att.scale, att.causal,
                   att.window, att.softcap)
        out = add("call_function", operator.getitem, call, 0)
    att.anchor.replace_all_uses_with(out)
    for node in [att.anchor, *reversed(att.chain)]:
        graph.erase_node(node)
    _repropagate(out, fake)


def _repropagate(start: Node, fake: FakeTensorMode) -> None:
    """Re-derive the stored values of ``start``'s users, walking forward in graph order while a
    value changes (the op's contiguous ``out`` can have other strides than the node it
    replaced). A node that mutates, or that does not run on fake values, stops the walk."""
    heap = list(start.users)
    heapq.heapify(heap)
    queued = set(heap)
    while heap:
        node = heapq.heappop(heap)
        if node.op not in ("call_function", "call_method") or is_mutating(node):
            continue
        try:
            fresh = _compute(node, fake)
        except Exception:  # a callee that does not run on fake values: its value stays
            continue
        if describe_mismatch(_stored(node), fresh) is None:
            continue
        node.meta.update(dict.fromkeys([k for k in VALUE_KEYS if k in node.meta], fresh))
        for user in node.users:
            if user not in queued:
                queued.add(user)
                heapq.heappush(heap, user)
