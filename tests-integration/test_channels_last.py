"""Channels-last convolution graphs and loop order by memory order, end to end (oracle: eager).

COIL_CHANNELS_LAST is forced on (on the CPU the pass is off by default): convolution operands
become channels-last, the forward's saved activations stay channels-last (their strides are
reported to AOTAutograd and adopted by the backward graph), user outputs and gradients keep
eager's strides. Pointwise kernels over channels-last tensors run their loops in memory order.

On CUDA, TF32 is off for these tests (`fp32_convolutions`): cuDNN picks other algorithms for
channels-last and contiguous operands, and with TF32 they differ by ~1e-3 relative, above the
1e-4 tolerance (on about a third of a conv-bn-relu-conv output's elements).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from check import run_both
from coil.backend import COMPILED
from coil.knobs import knobs
from torch import nn

CL = torch.channels_last


@pytest.fixture(autouse=True)
def fp32_convolutions() -> Iterator[None]:
    """Full-precision fp32 convolutions and matmuls on CUDA for each test (see the docstring).

    cuDNN's flags through its `flags` context manager: once `torch.testing._internal.common_utils`
    is imported (the OpInfo tests import it), setting them directly raises."""
    cudnn = torch.backends.cudnn
    saved_matmul = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        with cudnn.flags(
            enabled=cudnn.enabled,
            benchmark=cudnn.benchmark,
            deterministic=cudnn.deterministic,
            allow_tf32=False,
        ):
            yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved_matmul


class ConvBnReluConv(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.c2 = nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c2(torch.relu(self.bn(self.c1(x))))


class Bottleneck(nn.Module):
    """A ResNet-50 bottleneck with a strided downsample, then global pooling and a classifier."""

    def __init__(self, cin: int = 8, mid: int = 4, cout: int = 16) -> None:
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid)
        self.c2, self.b2 = nn.Conv2d(mid, mid, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(mid)
        self.c3, self.b3 = nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout)
        self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=2, bias=False), nn.BatchNorm2d(cout))
        self.fc = nn.Linear(cout, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.b1(self.c1(x)))
        y = torch.relu(self.b2(self.c2(y)))
        y = torch.relu(self.b3(self.c3(y)) + self.down(x))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(y, 1), 1))


def _cl_strides(shape: tuple[int, ...]) -> list[int]:
    _, c, h, w = shape
    return [h * w * c, 1, w * c, c]


def test_conv_bn_relu_conv_trains_channels_last(device: torch.device) -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 8, 12, 12, device=device)
    with knobs.override(channels_last=True):
        run_both(ConvBnReluConv().to(device), x, train=True)
    assert all(s.eager_fallback is None for s in COMPILED), [s.eager_fallback for s in COMPILED]
    forward = next(s for s in COMPILED if s.name.startswith("forward"))
    backward = next(s for s in COMPILED if s.name.startswith("backward"))
    assert forward.output_strides is not None
    # the user's output keeps eager's strides; saved activations (conv output, relu) are NHWC
    assert forward.output_strides[0] == [1152, 144, 12, 1]
    assert sum(s == _cl_strides((2, 8, 12, 12)) for s in forward.output_strides) >= 2
    # the backward graph took them channels-last: no conversion of a saved activation
    assert backward.output_strides is not None


def test_conv_bn_relu_conv_inference_channels_last(device: torch.device) -> None:
    torch.manual_seed(0)
    model = ConvBnReluConv().to(device).eval()
    with knobs.override(channels_last=True):
        run_both(model, torch.randn(2, 8, 12, 12, device=device), train=False)
    (graph,) = COMPILED
    assert graph.output_strides == [[1152, 144, 12, 1]]
    # conversions: the input and the two weights, one copy back for the output
    clones = [o for origins in graph.kernel_origins for o in origins if o.startswith("clone")]
    assert len(clones) == 4, graph.kernel_origins


def test_bottleneck_block_trains_channels_last(device: torch.device) -> None:
    torch.manual_seed(0)
    with knobs.override(channels_last=True):
        run_both(Bottleneck().to(device), torch.randn(2, 8, 12, 12, device=device), train=True)
    assert all(s.eager_fallback is None for s in COMPILED), [s.eager_fallback for s in COMPILED]
    forward = next(s for s in COMPILED if s.name.startswith("forward"))
    assert forward.output_strides is not None and forward.output_strides[0] == [5, 1]
    # two conversions: the input (once for c1 and the downsample) and the 3x3 weight (1x1 weights
    # are channels-last already); nothing between the convolutions
    clones = [o for origins in forward.kernel_origins for o in origins if o.startswith("clone_default")]
    assert len(clones) == 2, forward.kernel_origins


def test_small_cnn_with_pooling_and_flatten_trains_channels_last(device: torch.device) -> None:
    """max/avg pooling keep NHWC; flattening NHWC is no view: it reads an NCHW copy."""
    from models import MODELS

    cls, shape = MODELS["cnn"]
    torch.manual_seed(0)
    with knobs.override(channels_last=True):
        run_both(cls().to(device), torch.randn(*shape, device=device), train=True)
    assert all(s.eager_fallback is None for s in COMPILED), [s.eager_fallback for s in COMPILED]
    forward = next(s for s in COMPILED if s.name.startswith("forward"))
    assert forward.output_strides is not None
    assert any(s is not None and len(s) == 4 and s[1] == 1 for s in forward.output_strides)


def test_saved_activation_strides_survive_the_graph_cache(device: torch.device) -> None:
    """A forward loaded from the whole-graph cache reports the strides it was compiled with."""
    x = torch.randn(2, 8, 12, 12, device=device)
    runs = []
    with knobs.override(channels_last=True, graph_cache=True):
        for _ in range(2):
            torch._dynamo.reset()
            torch.manual_seed(0)
            run_both(ConvBnReluConv().to(device), x, train=True)
            runs.append([(s.graph_cache, s.output_strides) for s in COMPILED if s.name.startswith("forward")][-1])
    (first_status, first), (second_status, second) = runs
    assert first_status == "miss" and second_status == "hit"
    assert first == second and _cl_strides((2, 8, 12, 12)) in first


def test_channels_last_pointwise_runs_in_memory_order(device: torch.device) -> None:
    def f(x: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = (x * 2).relu() + b[None, :, None, None]
        return y, y.contiguous()  # a channels-last result and its NCHW copy

    x = torch.randn(2, 5, 6, 7, device=device).to(memory_format=CL)
    b = torch.randn(5, device=device)
    with knobs.override(fallback_on_error=False):
        got = torch.compile(f, backend="coil")(x, b)
    want = f(x, b)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)
        assert g.stride() == w.stride()
    (graph,) = COMPILED
    source = "\n".join(graph.kernel_sources.values())
    assert graph.kernels <= 2, graph.kernel_origins
    assert "xnumel" in source


def test_permuted_and_transposed_layouts_match_eager(device: torch.device) -> None:
    def f(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        a = x.permute(2, 0, 1) * 3  # eager keeps x's memory order: a permuted output
        b = (y.t() + 1).sum(1)      # a column-major producer of a row reduction
        c = (x.transpose(1, 2) - 1).contiguous()
        return a, b, c, a.exp().amax(0)

    x, y = torch.randn(3, 4, 5, device=device), torch.randn(6, 7, device=device)
    with knobs.override(fallback_on_error=False):
        got = torch.compile(f, backend="coil")(x, y)
    for g, w in zip(got, f(x, y), strict=True):
        torch.testing.assert_close(g, w)
        assert g.stride() == w.stride()


def test_channels_last_pointwise_with_dynamic_shapes(device: torch.device) -> None:
    """Symbolic strides (H*W*C, 1, W*C, C) still order the loops: one flat coalesced loop."""

    def f(x: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = (x * 2).relu() + b[None, :, None, None]
        return y, y.sum(1)

    g = torch.compile(f, backend="coil", dynamic=True)
    with knobs.override(fallback_on_error=False):
        for shape in ((2, 3, 4, 5), (3, 5, 2, 7)):
            x = torch.randn(*shape, device=device).to(memory_format=CL)
            b = torch.randn(shape[1], device=device)
            for got, want in zip(g(x, b), f(x, b), strict=True):
                torch.testing.assert_close(got, want)
                assert got.stride() == want.stride()
    assert all(s.eager_fallback is None for s in COMPILED)
