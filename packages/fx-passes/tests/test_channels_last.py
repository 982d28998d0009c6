"""channels_last: convolution operands NHWC, the layout flows, outputs keep their strides.

The verifier is on (conftest), so every pipeline run below also checks that each node's
``meta["val"]`` matches a fresh fake propagation after the pass.
"""

from __future__ import annotations

import pytest
import torch
from coil.fx_passes import (
    adopt_input_strides,
    channels_last,
    check_graph,
    knobs,
    run_post_grad_passes,
)
from coil.fx_passes.infra import GRAPH_KIND
from coil.fx_passes.passes.channels_last import FREE_OUTPUTS, convert_to_channels_last
from torch.fx import GraphModule

aten = torch.ops.aten
F = torch.nn.functional
CL = torch.channels_last


def _calls(gm: GraphModule, *targets: object) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes if n.target in targets]


def _is_cl(node: object) -> bool:
    v = node.meta["val"]  # type: ignore[attr-defined]
    return bool(v.is_contiguous(memory_format=CL))


def _outputs(gm: GraphModule) -> list[torch.fx.Node]:
    out = next(n for n in gm.graph.nodes if n.op == "output").args[0]
    return list(out) if isinstance(out, tuple | list) else [out]


class ConvNet(torch.nn.Module):
    """conv -> batch norm -> relu -> conv (the pattern of every ResNet block)."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = torch.nn.Conv2d(2, 8, 3, padding=1, bias=False)
        self.bn = torch.nn.BatchNorm2d(8)
        self.c2 = torch.nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor]:
        return (self.c2(torch.relu(self.bn(self.c1(x)))),)


def _forced(gm: GraphModule, is_backward: bool) -> GraphModule:
    with knobs.override(channels_last=True):
        return run_post_grad_passes(gm, is_backward=is_backward)


def test_conv_bn_relu_conv_forward_and_backward(aot) -> None:
    torch.manual_seed(0)
    net = ConvNet()
    x = torch.randn(2, 2, 12, 12, requires_grad=True)
    cap = aot(net, [x], _forced)
    got = cap.fn(x)
    x_ref = x.detach().clone().requires_grad_(True)
    want = net(x_ref)[0]
    torch.testing.assert_close(got, want)
    assert got.stride() == want.stride()  # the user's output keeps its strides
    got.square().sum().backward()
    grads = [p.grad.clone() for p in net.parameters()] + [x.grad.clone()]
    net.zero_grad()
    want.square().sum().backward()
    for g, w in zip(grads, [p.grad for p in net.parameters()] + [x_ref.grad], strict=True):
        torch.testing.assert_close(g, w)
        assert g.stride() == w.stride()
    fw, bw = cap.after
    for gm in (fw, bw):
        convs = _calls(gm, aten.convolution.default, aten.convolution_backward.default)
        assert convs
        for c in convs:
            operands = (0, 1) if c.target is aten.convolution.default else (0, 1, 2)
            assert all(_is_cl(c.args[i]) for i in operands), c.format_node()
    # the layout flows: the second convolution reads batch norm + relu's result, no conversion
    _, c2 = _calls(fw, aten.convolution.default)
    assert c2.args[0].target is not aten.clone.default and _is_cl(c2.args[0])
    # the outputs keep their strides (nothing marked free: saved activations too)
    for before, after in zip(cap.before, cap.after, strict=True):
        for a, b in zip(_outputs(before), _outputs(after), strict=True):
            if isinstance(a, torch.fx.Node) and isinstance(a.meta.get("val"), torch.Tensor):
                assert a.meta["val"].stride() == b.meta["val"].stride()


def test_cast_producers_take_the_memory_format_instead_of_a_copy(trace) -> None:
    """Autocast's `_to_copy` of the input and weight becomes channels-last itself."""

    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return F.conv2d(x.double(), w.double(), padding=1).relu().sum((2, 3))

    x, w = torch.randn(2, 3, 8, 8), torch.randn(4, 3, 3, 3)
    gm = trace(f, x, w)
    assert convert_to_channels_last(gm, devices=None, dtypes=(torch.float64,))
    check_graph(gm, pass_name="channels_last")
    assert not _calls(gm, aten.clone.default)
    casts = _calls(gm, aten._to_copy.default)
    assert len(casts) == 2 and all(c.kwargs["memory_format"] == CL and _is_cl(c) for c in casts)
    (conv,) = _calls(gm, aten.convolution.default)
    assert _is_cl(conv)
    gm.recompile()
    torch.testing.assert_close(gm(x, w), f(x, w))
    assert not convert_to_channels_last(gm, devices=None, dtypes=(torch.float64,))  # a fixpoint


def test_outputs_keep_strides_unless_marked_free(trace) -> None:
    def f(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = F.conv2d(x, w, padding=1)
        return y.relu(), y  # (a user output, a "saved activation")

    x, w = torch.randn(2, 3, 8, 8), torch.randn(4, 3, 3, 3)
    gm = trace(f, x, w)
    gm.meta[FREE_OUTPUTS] = (1,)
    assert convert_to_channels_last(gm, devices=None, dtypes=(torch.float32,))
    check_graph(gm, pass_name="channels_last")
    kept, free = _outputs(gm)
    assert kept.meta["val"].is_contiguous() and _is_cl(free)
    gm.recompile()
    for got, want in zip(gm(x, w), f(x, w), strict=True):
        torch.testing.assert_close(got, want)
    assert [t.stride() for t in gm(x, w)] == [kept.meta["val"].stride(), free.meta["val"].stride()]


def test_output_with_a_permuted_dense_layout_gets_it_back(trace) -> None:
    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return F.conv2d(x, w).permute(0, 2, 1, 3) + 1  # strides (288, 8, 64, 1)-like: not NCHW/NHWC

    x, w = torch.randn(2, 3, 8, 8), torch.randn(4, 3, 1, 1)
    gm = trace(f, x, w)
    before = _outputs(gm)[0].meta["val"].stride()
    assert convert_to_channels_last(gm, devices=None, dtypes=(torch.float32,))
    check_graph(gm, pass_name="channels_last")
    assert _outputs(gm)[0].meta["val"].stride() == before
    gm.recompile()
    got = gm(x, w)
    torch.testing.assert_close(got, f(x, w))
    assert got.stride() == before


def test_a_view_that_cannot_take_channels_last_reads_a_copy(trace) -> None:
    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return F.conv2d(x, w, padding=1).relu().view(2, -1).cumsum(1)  # flattening NHWC is no view

    x, w = torch.randn(2, 3, 8, 8), torch.randn(4, 3, 3, 3)
    gm = trace(f, x, w)
    assert convert_to_channels_last(gm, devices=None, dtypes=(torch.float32,))
    check_graph(gm, pass_name="channels_last")
    (conv,) = _calls(gm, aten.convolution.default)
    (view,) = _calls(gm, aten.view.default)
    assert _is_cl(conv) and view.args[0].target is aten.clone.default
    assert view.args[0].meta["val"].is_contiguous()
    gm.recompile()
    torch.testing.assert_close(gm(x, w), f(x, w))


def test_an_output_of_non_dense_strides_leaves_the_conv_alone(trace) -> None:
    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return F.conv2d(x, w, padding=1)[:, :, ::2]  # a strided slice: no copy gives it back

    x, w = torch.randn(2, 3, 8, 8), torch.randn(4, 3, 3, 3)
    gm = trace(f, x, w)
    assert not convert_to_channels_last(gm, devices=None, dtypes=(torch.float32,))
    check_graph(gm, pass_name="channels_last")
    assert not _calls(gm, aten.clone.default)
    gm.recompile()
    torch.testing.assert_close(gm(x, w), f(x, w))


def test_knob_auto_leaves_cpu_and_fp32_alone(trace) -> None:
    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return F.conv2d(x, w)

    x, w = torch.randn(1, 3, 6, 6), torch.randn(2, 3, 3, 3)
    for setting, changes in ((None, False), (False, False), (True, True)):
        gm = trace(f, x, w)
        with knobs.override(channels_last=setting):
            assert channels_last(gm).modified is changes
    # auto on CUDA bf16 only; fp32 CUDA convolutions stay NCHW even when asked for the device
    gm = trace(f, x, w)
    assert not convert_to_channels_last(gm, devices=("cpu",))


def test_adopt_input_strides_rederives_the_graph_and_keeps_outputs(trace) -> None:
    """A backward graph whose saved activation arrives channels-last."""

    def f(a: torch.Tensor, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        t = a * g
        return t, t.sum((0, 2, 3))

    a, g = torch.randn(2, 3, 4, 5), torch.randn(2, 3, 4, 5)
    gm = trace(f, a, g)
    a_cl = a.contiguous(memory_format=CL)
    fake = next(n for n in gm.graph.nodes if n.op == "placeholder").meta["val"].fake_mode
    examples = [fake.from_tensor(a_cl), fake.from_tensor(g)]
    assert adopt_input_strides(gm, examples)
    check_graph(gm, pass_name="adopt_input_strides")
    first = next(n for n in gm.graph.nodes if n.op == "placeholder")
    assert _is_cl(first)
    mul = _calls(gm, aten.mul.Tensor)[0]
    assert _is_cl(mul)  # eager: a channels-last operand makes the product channels-last
    assert _outputs(gm)[0].meta["val"].is_contiguous()  # the output keeps its strides
    gm.recompile()
    got = gm(a_cl, g)
    for x, y in zip(got, f(a, g), strict=True):
        torch.testing.assert_close(x, y)
    assert got[0].is_contiguous()
    assert not adopt_input_strides(gm, examples)  # already adopted


@pytest.mark.parametrize("groups", [1, 2])
def test_grouped_and_strided_convolutions(trace, groups: int) -> None:
    def f(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        y = F.conv2d(x, w, b, stride=2, padding=1, groups=groups)
        return F.conv2d(torch.sigmoid(y), w[:, : 4 // groups].contiguous(), groups=groups)

    x, w, b = torch.randn(2, 4, 9, 9), torch.randn(4, 4 // groups, 3, 3), torch.randn(4)
    gm = trace(f, x, w, b)
    assert convert_to_channels_last(gm, devices=None, dtypes=(torch.float32,))
    check_graph(gm, pass_name="channels_last")
    for c in _calls(gm, aten.convolution.default):
        assert _is_cl(c.args[0]) and _is_cl(c.args[1])
    gm.recompile()
    torch.testing.assert_close(gm(x, w, b), f(x, w, b))


@pytest.mark.parametrize("kind", ["forward", "backward", "inference", None])
@pytest.mark.parametrize("per_group", [1, 2])
def test_training_graphs_with_grouped_convolutions_keep_their_layout(trace, kind: str | None,
                                                                     per_group: int) -> None:
    """A grouped convolution with two input channels per group in a training graph: the graph
    keeps its layout (cuDNN's NHWC grouped gradients pay layout transforms); depthwise ones (one
    channel per group), inference graphs and graphs of unknown kind are converted."""
    def f(x: torch.Tensor, w: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
        return F.conv2d(torch.relu(F.conv2d(x, w2)), w, padding=1, groups=4 // per_group)

    x, w, w2 = torch.randn(2, 4, 6, 6), torch.randn(4, per_group, 3, 3), torch.randn(4, 4, 1, 1)
    gm = trace(f, x, w, w2)
    if kind is not None:
        gm.meta[GRAPH_KIND] = kind
    kept = kind in ("forward", "backward") and per_group > 1
    assert convert_to_channels_last(gm, devices=None, dtypes=(torch.float32,)) is not kept
    check_graph(gm, pass_name="channels_last")
    assert all(_is_cl(c.args[0]) is not kept for c in _calls(gm, aten.convolution.default))
    gm.recompile()
    torch.testing.assert_close(gm(x, w, w2), f(x, w, w2))
