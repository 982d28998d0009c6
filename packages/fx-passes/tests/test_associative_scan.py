"""expand_associative_scans: torch's associative_scan op becomes ATen ops computing the same scan."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from coil.fx_passes.passes.associative_scan import expand_associative_scans, scan_dim0
from torch._dynamo.backends.common import aot_autograd
from torch._higher_order_ops.associative_scan import associative_scan


def _linear(al: torch.Tensor, bl: torch.Tensor, ar: torch.Tensor, br: torch.Tensor) -> list[torch.Tensor]:
    """(a, b) pairs composing h -> a * h + b: associative, not commutative."""
    return [al * ar, ar * bl + br]


def _stepwise(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    pa, pb = [a[0]], [b[0]]
    for t in range(1, a.shape[0]):
        pa.append(pa[-1] * a[t])
        pb.append(a[t] * pb[-1] + b[t])
    return torch.stack(pa), torch.stack(pb)


@pytest.mark.parametrize("n", [*range(1, 18), 64, 100])
def test_scan_matches_the_step_by_step_recurrence(n: int) -> None:
    a, b = torch.rand(n, 3, dtype=torch.float64), torch.randn(n, 3, dtype=torch.float64)
    got = scan_dim0(_linear, [a, b])
    for g, w in zip(got, _stepwise(a, b), strict=True):
        torch.testing.assert_close(g, w)
    (total,) = scan_dim0(lambda x, y: [x + y], [b])
    torch.testing.assert_close(total, torch.cumsum(b, 0))


def _layout(t: torch.Tensor) -> list[int]:
    """The strides that matter: those of dims longer than 1."""
    return [st for st, size in zip(t.stride(), t.shape, strict=True) if size != 1]


def _captured(fn: Any, *args: torch.Tensor) -> list[tuple[torch.fx.GraphModule, list[Any]]]:
    """The forward graphs AOTAutograd makes of ``fn``, with the inputs each was called with."""
    graphs: list[tuple[torch.fx.GraphModule, list[Any]]] = []

    def keep(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        def call(*inputs: Any) -> Any:
            graphs.append((gm, list(inputs)))
            return gm(*inputs)

        return call

    torch._dynamo.reset()
    torch.compile(fn, backend=aot_autograd(fw_compiler=keep))(*args)
    return graphs


@pytest.mark.parametrize("length", [1, 5, 8])
def test_the_op_becomes_aten_ops_with_its_values_and_layouts(length: int) -> None:
    decay = torch.rand(4, dtype=torch.float64)

    def fn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        def combine(left: Any, right: Any) -> Any:
            return left[0] * right[0] * decay, right[0] * decay * left[1] + right[1]

        return associative_scan(combine, (a, b), dim=1, combine_mode="pointwise")[1].transpose(0, 1)

    a, b = torch.rand(2, length, 4, dtype=torch.float64), torch.randn(2, length, 4, dtype=torch.float64)
    ((gm, inputs),) = _captured(fn, a, b)
    hop = torch.ops.higher_order.associative_scan
    assert gm.graph.find_nodes(op="call_function", target=hop)
    want = gm(*inputs)
    (outputs,) = gm.graph.find_nodes(op="output")[0].args
    layouts = [_layout(o.meta["val"]) for o in outputs]  # what AOTAutograd traced (eager's op may differ)
    assert expand_associative_scans(gm).modified
    assert not gm.graph.find_nodes(op="call_function", target=hop)
    got = gm(*inputs)
    for g, w, layout in zip(got, want, layouts, strict=True):
        torch.testing.assert_close(g, w)
        assert _layout(g) == layout
