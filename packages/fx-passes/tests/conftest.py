"""Shared fixtures: the verifier is on in every test; helpers capture real AOTAutograd graphs
(and `dynamo_capture.capture`, imported by the tests that need Dynamo's own graphs)."""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch
from coil.fx_passes import knobs
from torch._functorch.aot_autograd import aot_module_simplified, make_boxed_func
from torch.fx import GraphModule
from torch.fx.experimental.proxy_tensor import make_fx

sys.path.insert(0, str(Path(__file__).parent))  # the tests' helper modules (dynamo_capture)


@pytest.fixture(autouse=True)
def _verify_on() -> Iterator[None]:
    with knobs.override(verify=True):
        yield


@dataclass
class Captured:
    """Forward/backward graphs AOTAutograd produced, before and after ``transform``."""

    fn: Callable[..., Any]
    before: list[GraphModule] = field(default_factory=list)
    after: list[GraphModule] = field(default_factory=list)


GraphTransform = Callable[[GraphModule, bool], GraphModule]


def aot_compile(
    module: torch.nn.Module, inputs: Sequence[torch.Tensor], transform: GraphTransform | None = None
) -> Captured:
    """Trace ``module`` with symbolic_trace + AOTAutograd; run ``transform`` on fw/bw graphs."""
    gm = torch.fx.symbolic_trace(module)
    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    if not isinstance(out_node.args[0], tuple):
        out_node.args = ((out_node.args[0],),)
        gm.recompile()
    captured = Captured(fn=lambda *a: None)

    def compiler(is_backward: bool) -> Callable[[GraphModule, Any], Any]:
        def compile_graph(g: GraphModule, _example: Any) -> Any:
            captured.before.append(copy.deepcopy(g))
            out = transform(g, is_backward) if transform is not None else g
            captured.after.append(out)
            return make_boxed_func(out.forward)

        return compile_graph

    compiled = aot_module_simplified(
        gm, list(inputs), fw_compiler=compiler(False), bw_compiler=compiler(True)
    )

    def run(*args: Any) -> Any:
        out = compiled(*args)
        return out[0] if len(out) == 1 else out

    captured.fn = run
    return captured


def ops(gm: GraphModule) -> list[str]:
    """The call_function targets of a graph, by name (e.g. ``aten.mm.default``)."""
    out = []
    for n in gm.graph.nodes:
        if n.op == "call_function":
            t = n.target
            out.append(
                str(t) if isinstance(t, torch._ops.OpOverload) else getattr(t, "__name__", str(t))
            )
    return out


@pytest.fixture
def aot() -> Callable[..., Captured]:
    return aot_compile


@pytest.fixture
def op_names() -> Callable[[GraphModule], list[str]]:
    return ops


def fake_trace(fn: Callable[..., Any], *inputs: Any) -> GraphModule:
    """make_fx in fake mode: a functional ATen graph with meta['val'] on every node."""
    return make_fx(fn, tracing_mode="fake")(*inputs)


@pytest.fixture
def trace() -> Callable[..., GraphModule]:
    return fake_trace
