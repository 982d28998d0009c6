"""unfold_conv_bias: a convolution's bias becomes a broadcast add; values and layouts kept."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from coil.fx_passes import check_graph, unfold_conv_bias, unfold_conv_bias_for
from torch.fx import GraphModule

aten = torch.ops.aten


def _convs(gm: GraphModule) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes if n.target is aten.convolution.default]


CASES = {
    "conv2d channels-last": (lambda x, w, b: torch.relu(F.conv2d(x, w, b, padding=1)) * 2,
                             torch.randn(2, 4, 6, 6).to(memory_format=torch.channels_last),
                             torch.randn(8, 4, 3, 3), torch.randn(8)),
    "conv2d grouped, strided": (lambda x, w, b: F.conv2d(x, w, b, stride=2, groups=2),
                                torch.randn(2, 4, 7, 7), torch.randn(6, 2, 3, 3), torch.randn(6)),
    "conv1d": (lambda x, w, b: F.conv1d(x, w, b, dilation=2), torch.randn(3, 4, 11), torch.randn(5, 4, 3),
               torch.randn(5)),
    "conv3d": (lambda x, w, b: F.conv3d(x, w, b), torch.randn(1, 2, 4, 5, 5), torch.randn(3, 2, 2, 2, 2),
               torch.randn(3)),
    "transposed": (lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, output_padding=1),
                   torch.randn(2, 4, 5, 5), torch.randn(4, 3, 3, 3), torch.randn(3)),
    "1x1 output as graph output": (lambda x, w, b: F.conv2d(x, w, b), torch.randn(2, 8, 1, 1),
                                   torch.randn(4, 8, 1, 1), torch.randn(4)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_bias_becomes_an_add_with_the_same_result(trace, name: str) -> None:
    fn, x, w, b = CASES[name]
    x, w, b = x.double(), w.double(), b.double()
    gm = trace(fn, x, w, b)
    assert unfold_conv_bias_for(gm, devices=("cpu",))
    check_graph(gm, pass_name="unfold_conv_bias")
    assert all(c.args[2] is None for c in _convs(gm))
    adds = [n for n in gm.graph.nodes if n.target is aten.add.Tensor]
    assert len(adds) == 1
    gm.recompile()
    got, want = gm(x, w, b), fn(x, w, b)
    torch.testing.assert_close(got, want)
    assert got.stride() == want.stride()  # the graph output keeps eager's layout
    assert not unfold_conv_bias_for(gm, devices=("cpu",))  # a fixpoint


def test_only_the_named_devices(trace) -> None:
    fn, x, w, b = CASES["conv2d channels-last"]
    gm = trace(fn, x, w, b)
    assert not unfold_conv_bias(gm).modified  # the pass proper: CUDA convolutions only
    assert _convs(gm)[0].args[2] is not None


def test_no_bias_is_left_alone(trace) -> None:
    gm = trace(lambda x, w: F.conv2d(x, w), torch.randn(1, 2, 4, 4), torch.randn(3, 2, 3, 3))
    assert not unfold_conv_bias_for(gm, devices=("cpu",))


def test_training_graphs_keep_gradients(aot) -> None:
    """Forward rewritten in an AOTAutograd forward graph; the backward's bias gradient is the
    convolution_backward's, unchanged; every gradient equals eager's."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 6, 3, padding=1), torch.nn.GELU(),
                                torch.nn.Conv2d(6, 2, 1)).double()
    x = torch.randn(2, 3, 5, 5, dtype=torch.float64, requires_grad=True)

    def transform(g: GraphModule, is_backward: bool) -> GraphModule:
        if not is_backward:
            assert unfold_conv_bias_for(g, devices=("cpu",))
            check_graph(g, pass_name="unfold_conv_bias")
            g.recompile()
        return g

    cap = aot(model, [x], transform)
    out = cap.fn(x)
    out.sum().backward()
    got = [x.grad, *(p.grad for p in model.parameters())]
    x2 = x.detach().clone().requires_grad_(True)
    model.zero_grad()
    model(x2).sum().backward()
    want = [x2.grad, *(p.grad for p in model.parameters())]
    for g_, w_ in zip(got, want, strict=True):
        torch.testing.assert_close(g_, w_)
