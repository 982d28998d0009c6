"""Channels-last (NHWC) layouts for convolution graphs.

cuDNN's bf16/fp16 convolutions run much faster on channels-last tensors; a graph AOTAutograd
hands over keeps eager's NCHW layouts. The pass makes the operands of every 4-D
``aten.convolution`` (input, weight) and ``aten.convolution_backward`` (grad output, input,
weight) channels-last and lets the layout flow:

* an operand made by ``_to_copy`` or ``clone`` (the autocast cast of a weight or of the input
  image) is made channels-last by giving that op ``memory_format=torch.channels_last``: no extra
  copy runs; any other operand is converted by a new
  ``clone(memory_format=torch.channels_last)`` (one per tensor, shared by every convolution
  reading it), which the scheduler can fuse into its producer;
* every node downstream is re-derived by fake propagation (:func:`refresh_meta`): eager
  semantics decide what a pointwise op or a reduction makes of channels-last inputs, and a
  convolution on channels-last operands returns channels-last results, so a conv -> batch norm
  -> relu -> conv chain needs one conversion at its start, none between the convolutions;
* graph outputs keep the strides they had (a ``_to_copy``/``clone`` output that nothing else
  reads gets its memory format back, any other output a copy to its old layout), except the
  positions listed in ``gm.meta[FREE_OUTPUTS]``: coil's backend lists there the activations a
  forward graph saves for the backward, whose strides it reports to AOTAutograd
  (``TracingContext.report_output_strides``), so that they may stay channels-last;
* a training graph (``gm.meta[GRAPH_KIND]`` forward or backward) with a grouped convolution of
  more than one input channel per group (RegNet's, ResNeXt's) is left in its layout: cuDNN runs
  their NHWC gradients through layout transforms that cost more than channels-last saves
  (RegNet-Y's AMP step, docs/perf.md); depthwise convolutions (one channel per group) gain;
* a ``view`` that cannot take the new strides (flattening an NHWC tensor) reads a copy of its
  input in the input's old layout; a rewrite still failing, or whose output strides cannot be
  restored, is undone, convolution by convolution.

:func:`adopt_input_strides` is the other half of saved activations: the backward graph's
placeholders keep the strides of the original forward, the example inputs AOTAutograd passes
have the reported ones; it re-derives the graph from the example inputs' strides (outputs keep
theirs).

When it runs (``COIL_CHANNELS_LAST``, knob ``channels_last`` of :mod:`coil.knobs`): unset, on graphs with a 4-D
convolution on CUDA in bf16/fp16; ``1``: on graphs with a 4-D convolution on any device in any
floating dtype (CPU tests); ``0``: never. Graphs with symbolic sizes are left alone.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from coil.fx_passes.fake_meta import (
    alias_signature,
    compute_val,
    describe_mismatch,
    fake_mode_of,
    refresh_meta,
)
from coil.fx_passes.infra import GRAPH_KIND, PassResult, Stage, graph_pass
from coil.fx_passes.ops import overload_of
from coil.knobs import knobs
from torch.fx import GraphModule, Node
from torch.fx.node import Argument

__all__ = ["FREE_OUTPUTS", "adopt_input_strides", "channels_last_for", "convert_to_channels_last"]

aten = torch.ops.aten

FREE_OUTPUTS = "coil_layout_free_outputs"  # gm.meta key: output positions whose strides may change
_CONV_OPERANDS = {aten.convolution.default: (0, 1), aten.convolution_backward.default: (0, 1, 2)}
_FORMAT_OPS = frozenset({aten._to_copy.default, aten.clone.default})
_AUTO_DTYPES = frozenset({torch.bfloat16, torch.float16})
_FLOATS = frozenset({torch.bfloat16, torch.float16, torch.float32, torch.float64})


def _val(node: object) -> torch.Tensor | None:
    v = node.meta.get("val") if isinstance(node, Node) else None
    return v if isinstance(v, torch.Tensor) else None


def _static(t: torch.Tensor) -> bool:
    return all(isinstance(d, int) for d in (*t.shape, *t.stride(), t.storage_offset()))


def _is_cl(t: torch.Tensor) -> bool:
    return t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last)


def _dense_order(shape: Sequence[int], stride: Sequence[int]) -> list[int] | None:
    """Dims from outermost to innermost if (shape, stride) is non-overlapping and dense, else None."""
    dims = sorted(range(len(shape)), key=lambda d: (-stride[d], -d))
    expect = 1
    for d in reversed(dims):
        if shape[d] != 1 and stride[d] != expect:
            return None
        expect *= shape[d]
    return dims


def _output_node(gm: GraphModule) -> Node:
    out: Node = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    return out


def _outputs(gm: GraphModule) -> list[Argument]:
    args = _output_node(gm).args[0]
    return list(args) if isinstance(args, list | tuple) else [args]


def _output_strides(gm: GraphModule) -> list[tuple[int, ...] | None]:
    out: list[tuple[int, ...] | None] = []
    for a in _outputs(gm):
        v = _val(a)
        out.append(tuple(v.stride()) if v is not None and _static(v) else None)
    return out


def _set_outputs(gm: GraphModule, values: list[Argument]) -> None:
    node = _output_node(gm)
    old = node.args[0]
    new: Argument = tuple(values) if isinstance(old, tuple) else list(values) if isinstance(old, list) else values[0]
    node.args = (new,)


def _conv_layout_fits(node: Node, devices: Collection[str] | None, dtypes: Collection[torch.dtype]) -> bool:
    """A 4-D convolution (or its backward) on a device and dtype the pass handles, static sizes."""
    if overload_of(node) not in _CONV_OPERANDS:
        return False
    ref = _val(node) if overload_of(node) is aten.convolution.default else _val(node.args[1])
    if ref is None or ref.dim() != 4 or ref.dtype not in dtypes or not _static(ref):
        return False
    if devices is not None and ref.device.type not in devices:
        return False
    operands = [_val(node.args[i]) for i in _CONV_OPERANDS[node.target]]  # type: ignore[index]
    return all(v is not None and v.dim() == 4 and _static(v) for v in operands)


@dataclass
class _Edit:
    """One convolution's rewrite, for undo: nodes added, producers re-formatted, args replaced."""

    added: list[Node] = field(default_factory=list)
    kwargs: list[tuple[Node, dict[str, Any]]] = field(default_factory=list)
    args: list[tuple[Node, tuple[Argument, ...]]] = field(default_factory=list)

    def touched(self) -> list[Node]:
        return [*self.added, *(n for n, _ in self.kwargs), *(n for n, _ in self.args)]


def _insert_point(gm: GraphModule, node: Node) -> Node:
    """Where a conversion of `node` goes: right after it (after the last placeholder for one)."""
    if node.op == "placeholder":
        last: Node = [p for p in gm.graph.nodes if p.op == "placeholder"][-1]
        return last
    return node


def _convert_operands(gm: GraphModule, conv: Node, converted: dict[Node, Node], reformat: bool) -> _Edit:
    """Make `conv`'s operands channels-last: re-format a `_to_copy`/`clone` producer (when
    `reformat`) or read a (shared) channels-last clone."""
    edit = _Edit()
    args = list(conv.args)
    for i in _CONV_OPERANDS[conv.target]:  # type: ignore[index]
        a = args[i]
        v = _val(a)
        if not isinstance(a, Node) or v is None or _is_cl(v):
            continue
        if a in converted:
            args[i] = converted[a]
        elif reformat and overload_of(a) in _FORMAT_OPS and a.kwargs.get("memory_format") in (
                None, torch.preserve_format, torch.contiguous_format):
            edit.kwargs.append((a, dict(a.kwargs)))
            a.kwargs = {**a.kwargs, "memory_format": torch.channels_last}
        else:
            with gm.graph.inserting_after(_insert_point(gm, a)):
                clone = gm.graph.call_function(aten.clone.default, (a,), {"memory_format": torch.channels_last})
            edit.added.append(clone)
            converted[a] = clone
            args[i] = clone
    if tuple(args) != tuple(conv.args):
        edit.args.append((conv, tuple(conv.args)))
        conv.args = tuple(args)
    return edit


_VIEWS_NEEDING_STRIDES = frozenset({aten.view.default, aten._unsafe_view.default})


def _propagate(gm: GraphModule, dirty: Collection[Node]) -> Node | None:
    """:func:`refresh_meta`'s walk (recompute `dirty` and every node whose input changed, keep a
    value whose metadata and aliasing are unchanged), stopping at the first node whose fake
    propagation raises: that node is returned (nodes before it are up to date), else None."""
    fake_mode = fake_mode_of(gm)
    assert fake_mode is not None
    changed: set[Node] = set()
    for node in gm.graph.nodes:
        if node.op != "call_function" or (node not in dirty and not any(a in changed for a in node.all_input_nodes)):
            continue
        try:
            fresh = compute_val(node, fake_mode)
        except Exception:
            return node  # type: ignore[no-any-return]
        old = node.meta.get("val")
        if ("val" in node.meta and describe_mismatch(old, fresh) is None
                and alias_signature(node, old) == alias_signature(node, fresh)):
            continue
        node.meta["val"] = fresh
        changed.add(node)
    return None


def _view_input_back(gm: GraphModule, view: Node, old: dict[Node, tuple[int, ...]], edit: _Edit) -> list[Node] | None:
    """Make `view` read a copy of its input in the input's layout before the pass (recorded in
    `edit`); the added nodes, or None when `view` is no such view or that layout is not dense."""
    src = view.args[0] if view.args else None
    v = _val(src)
    if overload_of(view) not in _VIEWS_NEEDING_STRIDES or not isinstance(src, Node) or v is None or src not in old:
        return None
    shape = [int(d) for d in v.shape]
    if _same_layout(shape, v.stride(), old[src]) or _dense_order(shape, old[src]) is None:
        return None
    added = _copy_to(gm, src, shape, old[src])
    edit.added.extend(added)
    edit.args.append((view, tuple(view.args)))
    view.args = (added[-1], *view.args[1:])
    return added


def _undo(gm: GraphModule, edit: _Edit, converted: dict[Node, Node]) -> None:
    for node, args in reversed(edit.args):
        node.args = args
    for node, kwargs in edit.kwargs:
        node.kwargs = kwargs
    erased: set[Node] = set()
    for node in reversed(edit.added):
        for k in [k for k, c in converted.items() if c is node]:
            del converted[k]
        if not node.users:
            gm.graph.erase_node(node)
            erased.add(node)
    refresh_meta(gm, [n for n in edit.touched() if n not in erased])


def _restorable(gm: GraphModule, before: list[tuple[int, ...] | None], free: Collection[int]) -> bool:
    """Every kept output whose strides changed had a dense layout a copy can give back."""
    outs = _outputs(gm)
    for i, (a, old) in enumerate(zip(outs, before, strict=True)):
        v = _val(a)
        if i in free or old is None or v is None:
            continue
        shape = [int(d) for d in v.shape]
        if not _same_layout(shape, v.stride(), old) and _dense_order(shape, old) is None:
            return False
    return True


def _copy_to(gm: GraphModule, node: Node, shape: Sequence[int], stride: tuple[int, ...]) -> list[Node]:
    """Nodes making a copy of `node` laid out with `stride` (dense; the copy is the last),
    inserted right after `node` (so before a ``copy_`` epilogue)."""
    g = gm.graph
    if stride == _contiguous(shape):
        with g.inserting_after(node):
            return [g.call_function(aten.clone.default, (node,), {"memory_format": torch.contiguous_format})]
    if len(shape) == 4 and stride == _channels_last(shape):
        with g.inserting_after(node):
            return [g.call_function(aten.clone.default, (node,), {"memory_format": torch.channels_last})]
    order = _dense_order(shape, stride)
    assert order is not None
    inverse = [order.index(d) for d in range(len(order))]
    with g.inserting_after(node):
        p = g.call_function(aten.permute.default, (node, order))
    with g.inserting_after(p):
        c = g.call_function(aten.clone.default, (p,), {"memory_format": torch.contiguous_format})
    with g.inserting_after(c):
        back = g.call_function(aten.permute.default, (c, inverse))
    return [p, c, back]


def _contiguous(shape: Sequence[int]) -> tuple[int, ...]:
    strides, step = [], 1
    for d in reversed(shape):
        strides.append(step)
        step *= max(int(d), 1)
    return tuple(reversed(strides))


def _channels_last(shape: Sequence[int]) -> tuple[int, ...]:
    _, c, h, w = (max(int(d), 1) for d in shape)
    return (h * w * c, 1, w * c, c)


def _same_layout(shape: Sequence[int], a: Sequence[int], b: Sequence[int]) -> bool:
    """Equal strides on every dim longer than 1 (a size-1 dim's stride is never used)."""
    return all(n <= 1 or x == y for n, x, y in zip(shape, a, b, strict=True))


def restore_output_strides(gm: GraphModule, before: list[tuple[int, ...] | None],
                           free: Collection[int] = ()) -> bool:
    """Give every output not in `free` the strides of `before` back (see the module docstring).

    Returns whether the graph changed. Raises ValueError when an output cannot be restored
    (its old layout was not dense: callers check :func:`_restorable` first)."""
    outs = _outputs(gm)
    changed = False
    memo: dict[Node, Node] = {}
    for i, (a, old) in enumerate(zip(outs, before, strict=True)):
        v = _val(a)
        if i in free or old is None or v is None or not isinstance(a, Node):
            continue
        shape = [int(d) for d in v.shape]
        if _same_layout(shape, v.stride(), old):
            continue
        if _dense_order(shape, old) is None:
            raise ValueError(f"output {i} ({a.name}) had the non-dense strides {old}: cannot restore them")
        if a not in memo:
            fmt = (torch.contiguous_format if old == _contiguous(shape)
                   else torch.channels_last if len(shape) == 4 and old == _channels_last(shape) else None)
            only_kept = all(j not in free for j, o in enumerate(outs) if o is a)
            if (fmt is not None and overload_of(a) in _FORMAT_OPS and set(a.users) == {_output_node(gm)}
                    and only_kept):
                a.kwargs = {**a.kwargs, "memory_format": fmt}  # the copy that makes it takes the old format
                refresh_meta(gm, [a])
                memo[a] = a
            else:
                added = _copy_to(gm, a, shape, old)
                refresh_meta(gm, added)
                memo[a] = added[-1]
        outs[i] = memo[a]
        changed = True
    if changed:
        _set_outputs(gm, outs)
    return changed


def _free_outputs(gm: GraphModule) -> frozenset[int]:
    got = gm.meta.get(FREE_OUTPUTS, ())
    return frozenset(int(i) for i in got)


def _grouped(node: Node) -> bool:
    """A grouped convolution (or its backward) with more than one input channel per group (a
    depthwise one has one)."""
    backward = overload_of(node) is aten.convolution_backward.default
    weight = _val(node.args[2] if backward else node.args[1])
    groups = node.args[9] if backward else node.args[8]
    return weight is not None and isinstance(groups, int) and groups > 1 and int(weight.shape[1]) > 1


def convert_to_channels_last(gm: GraphModule, devices: Collection[str] | None = ("cuda",),
                             dtypes: Collection[torch.dtype] = _AUTO_DTYPES) -> bool:
    """The pass on convolutions on `devices` (None: any) in `dtypes`; returns whether it changed
    the graph. Values and shapes are unchanged; output strides as the module docstring says."""
    if fake_mode_of(gm) is None:
        return False
    convs = [n for n in gm.graph.nodes if _conv_layout_fits(n, devices, dtypes)]
    if not convs:
        return False
    if gm.meta.get(GRAPH_KIND) in ("forward", "backward") and any(_grouped(c) for c in convs):
        return False  # cuDNN's NHWC grouped convolutions train slower than NCHW (module docstring)
    free = _free_outputs(gm)
    before = _output_strides(gm)
    old = {n: tuple(int(s) for s in v.stride()) for n in gm.graph.nodes
           if (v := _val(n)) is not None and _static(v)}
    converted: dict[Node, Node] = {}
    changed = False
    for conv in convs:
        for reformat in (True, False):  # re-format producers first; else only clones
            edit = _convert_operands(gm, conv, converted, reformat)
            if not edit.touched():
                break
            failed = _propagate(gm, edit.touched())
            while failed is not None:  # a view of the new strides: read a copy in the old layout
                added = _view_input_back(gm, failed, old, edit)
                if added is None:
                    break
                failed = _propagate(gm, [*added, failed])
            if failed is None and _restorable(gm, before, free):
                changed = True
                break
            _undo(gm, edit, converted)
    if changed:
        restore_output_strides(gm, before, free)
    return changed


def channels_last_for(gm: GraphModule) -> bool:
    """Run the pass as ``COIL_CHANNELS_LAST`` says (auto, forced on, off); see the module docstring."""
    mode = knobs.channels_last
    if mode is False:
        return False
    if mode is None:
        return convert_to_channels_last(gm, ("cuda",), _AUTO_DTYPES)
    return convert_to_channels_last(gm, None, _FLOATS)


def adopt_input_strides(gm: GraphModule, example_inputs: Sequence[object]) -> bool:
    """Give placeholders the strides of `example_inputs` where they differ, re-derive the graph.

    AOTAutograd compiles a backward graph with example inputs whose saved activations carry the
    strides the forward's compiler reported, while the graph's placeholders keep the original
    forward's. Each placeholder (i-th, matching ``example_inputs[i]``) with a static tensor of
    the same shape, dtype and device but other strides gets a fresh FakeTensor with the example's
    strides; its users are re-derived, and graph outputs keep the strides they had.

    Returns whether the graph changed. Placeholders of symbolic shape are left alone.
    """
    fake_mode = fake_mode_of(gm)
    if fake_mode is None:
        return False
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(example_inputs):
        return False
    before = _output_strides(gm)
    users: list[Node] = []
    for node, ex in zip(placeholders, example_inputs, strict=True):
        v = _val(node)
        if v is None or not isinstance(ex, torch.Tensor) or not _static(v) or not _static(ex):
            continue
        if tuple(v.shape) != tuple(ex.shape) or v.dtype != ex.dtype or v.device != ex.device:
            continue
        if _same_layout([int(d) for d in v.shape], v.stride(), ex.stride()):
            continue
        with fake_mode:
            node.meta["val"] = torch.empty_strided(tuple(ex.shape), tuple(ex.stride()), dtype=ex.dtype,
                                                   device=ex.device, requires_grad=v.requires_grad)
        users.extend(node.users)
    if not users:
        return False
    refresh_meta(gm, users)
    restore_output_strides(gm, before)
    return True


@graph_pass("channels_last", stages=frozenset({Stage.POST_GRAD}))
def channels_last(gm: GraphModule) -> PassResult:
    """Make convolution operands channels-last (NHWC) and let the layout flow downstream.

    Stage: post-grad (functional ATen graphs with ``meta["val"]``).

    Args:
        gm: the graph; every 4-D ``aten.convolution`` / ``aten.convolution_backward`` of static
            shape is considered, on CUDA in bf16/fp16 by default (``COIL_CHANNELS_LAST``: ``1``
            any device and floating dtype, ``0`` off). ``gm.meta[FREE_OUTPUTS]``: output
            positions whose strides may change (saved activations whose strides are reported).

    Returns:
        ``PassResult(gm, modified)``; values and shapes unchanged, strides of intermediates may
        change, graph outputs keep theirs except the free positions.

    Example::

        before: w16 = _to_copy(w, dtype=bf16); y = convolution(x16, w16, ...); return (relu(y),)
        after:  w16 = _to_copy(w, dtype=bf16, memory_format=channels_last)
                x16cl = clone(x16, memory_format=channels_last)
                y = convolution(x16cl, w16, ...)                      # channels-last result
                r = relu(y)                                           # channels-last (eager rule)
                return (clone(r, memory_format=contiguous_format),)   # the output's old strides

    Soundness: layout changes never change values; every node's ``meta["val"]`` is re-derived
    by fake propagation, so each op's strides are what eager computes on the new inputs (the
    layout lowering gives every buffer). A convolution whose rewrite a view rejects, or that
    would change the strides of an output that had a non-dense layout, is left as it was.
    """
    return PassResult(gm, channels_last_for(gm))
