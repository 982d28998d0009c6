"""A CUDA convolution's bias as a broadcast add after a bias-free convolution, so that it fuses.

ATen's cuDNN convolution adds its bias in a separate elementwise kernel after the convolution
(``output.add_(bias)``): one more launch, one more read and write of the whole output, and more
host time per call than the convolution without bias. As an ``add`` in the graph, the bias
becomes part of the pointwise kernel that reads the convolution's output anyway (batch norm,
an activation, a residual add) and costs nothing of its own.

Only CUDA convolutions change (``unfold_conv_bias_for`` takes other devices, for tests): on the
CPU oneDNN adds the bias inside the convolution. The backward graph is not touched: its
``convolution_backward`` computes the bias gradient as before.
"""

from __future__ import annotations

from collections.abc import Collection

import torch
from coil.fx_passes.fake_meta import (
    compute_val,
    describe_mismatch,
    fake_mode_of,
    refresh_meta,
    users_to_refresh,
)
from coil.fx_passes.infra import PassResult, Stage, graph_pass
from coil.fx_passes.ops import overload_of
from torch.fx import GraphModule, Node

__all__ = ["unfold_conv_bias", "unfold_conv_bias_for"]

aten = torch.ops.aten


def _unfold(gm: GraphModule, conv: Node) -> bool:
    """Rewrite one ``convolution(x, w, b, ...)``; False (graph unchanged) when the bias-free
    convolution plus the add would not have the convolution's exact metadata."""
    fake_mode = fake_mode_of(gm)
    old = conv.meta.get("val")
    bias = conv.args[2]
    if fake_mode is None or not isinstance(old, torch.Tensor) or not isinstance(bias, Node):
        return False
    shape = [-1] + [1] * (old.dim() - 2)  # [C] -> [C, 1, ..., 1]: broadcasts over the spatial dims
    with gm.graph.inserting_before(conv):
        bare = gm.graph.call_function(aten.convolution.default, (conv.args[0], conv.args[1], None, *conv.args[3:]))
        view = gm.graph.call_function(aten.view.default, (bias, shape))
        add = gm.graph.call_function(aten.add.Tensor, (bare, view))
    new = [bare, view, add]
    try:
        for n in new:
            n.meta["val"] = compute_val(n, fake_mode)
        mismatch = describe_mismatch(old, add.meta["val"])
    except Exception:  # an argument the rewrite cannot take: leave the convolution as it is
        mismatch = "not computable"
    if mismatch is not None:  # e.g. a bias of another dtype, which the add would promote
        for n in reversed(new):
            gm.graph.erase_node(n)
        return False
    for key in ("stack_trace", "nn_module_stack", "source_fn_stack"):
        if key in conv.meta:
            for n in new:
                n.meta[key] = conv.meta[key]
    users = list(conv.users)
    conv.replace_all_uses_with(add)
    gm.graph.erase_node(conv)
    refresh_meta(gm, users_to_refresh(users, old, add.meta["val"]))
    return True


def unfold_conv_bias_for(gm: GraphModule, devices: Collection[str] = ("cuda",)) -> bool:
    """The pass on convolutions whose output is on ``devices``; returns whether the graph changed."""
    changed = False
    for node in list(gm.graph.nodes):
        if overload_of(node) is not aten.convolution.default or node.kwargs or len(node.args) != 9:
            continue
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor) or val.device.type not in devices or val.dim() < 3:
            continue
        changed |= _unfold(gm, node)
    return changed


@graph_pass("unfold_conv_bias", stages=frozenset({Stage.POST_GRAD}))
def unfold_conv_bias(gm: GraphModule) -> PassResult:
    """Split ``convolution(x, w, b, ...)`` on CUDA into ``add(convolution(x, w, None, ...), b)``.

    Stage: post-grad (functional ATen graphs with ``meta["val"]``).

    Args:
        gm: the graph module, edited in place.

    Returns:
        ``PassResult(gm, modified)``.

    Example::

        before: y = convolution(x, w, b, [1, 1], [1, 1], [1, 1], False, [0, 0], 1); r = relu(y)
        after:  c = convolution(x, w, None, ...); y = add(c, view(b, [-1, 1, 1])); r = relu(y)

    Soundness: the bias is added to every output position of its channel, which is what the
    broadcast add computes; the add's result must have the convolution's exact metadata
    (shape, strides, dtype, device; checked, else the node is left alone), so users and graph
    outputs see the same tensor. The sum may round once less when the add fuses with its
    consumer (the bias-free output is not stored in the output dtype first).
    """
    return PassResult(gm, unfold_conv_bias_for(gm))
