"""recompute_param_casts on partitions torch's min-cut partitioner makes (coil.backend.pipeline.param_casts):
which saved tensors become parameters, and that the pair still computes eager's gradients."""

from __future__ import annotations

from typing import Any

import torch
from coil.backend.pipeline.param_casts import recompute_param_casts
from torch._functorch.aot_autograd import aot_function, make_boxed_func
from torch._functorch.partitioners import min_cut_rematerialization_partition


def _saved_names(bw: torch.fx.GraphModule) -> list[str]:
    return [n.name for n in bw.graph.nodes if n.op == "placeholder" and not n.name.startswith("tangents")]


def _compiled(fn: Any, static: list[int], min_bytes: int, seen: dict[str, Any]) -> Any:
    def partition(joint: torch.fx.GraphModule, inputs: Any, **kwargs: Any) -> Any:
        fw, bw = min_cut_rematerialization_partition(joint, inputs, **kwargs)
        seen["before"] = _saved_names(bw)
        seen["done"] = recompute_param_casts(fw, bw, kwargs["num_fwd_outputs"], static, min_bytes)
        seen["after"] = _saved_names(bw)
        seen["bw"] = bw
        return fw, bw

    def boxed(gm: torch.fx.GraphModule, _: Any) -> Any:
        return make_boxed_func(gm)

    return aot_function(fn, fw_compiler=boxed, bw_compiler=boxed, partition_fn=partition)


def fn(w1: torch.Tensor, w2: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    h = torch.relu(x @ w1.to(torch.bfloat16).t())  # a weight cast, then viewed
    a = h.to(torch.float32)  # a cast of an activation: stays saved
    return (a @ w2).sum() + (a * a).sum()


def test_weight_casts_become_parameters_and_gradients_stay() -> None:
    torch.manual_seed(0)
    w1 = torch.randn(64, 32, requires_grad=True)
    w2 = torch.randn(64, 16, requires_grad=True)
    x = torch.randn(8, 32, dtype=torch.bfloat16, requires_grad=True)
    seen: dict[str, Any] = {}
    out = _compiled(fn, [0, 1], 0, seen)(w1, w2, x)
    got = torch.autograd.grad(out, (w1, w2, x))
    want = torch.autograd.grad(fn(w1, w2, x), (w1, w2, x))
    for g, e in zip(got, want, strict=True):
        torch.testing.assert_close(g, e)
    assert seen["done"] == 1, seen
    assert len(seen["after"]) == len(seen["before"])
    assert any(n.endswith("_param") for n in seen["after"]), seen["after"]
    targets = {str(n.target) for n in seen["bw"].graph.nodes if n.op == "call_function"}
    assert any("convert_element_type" in t or "_to_copy" in t for t in targets), targets


def test_nothing_changes_below_the_size_or_without_static_inputs() -> None:
    w1 = torch.randn(64, 32, requires_grad=True)
    w2 = torch.randn(64, 16, requires_grad=True)
    x = torch.randn(8, 32, dtype=torch.bfloat16, requires_grad=True)
    for static, min_bytes in (([0, 1], 1 << 20), ([], 0), ([2], 0)):
        seen: dict[str, Any] = {}
        out = _compiled(fn, static, min_bytes, seen)(w1, w2, x)
        torch.testing.assert_close(out, fn(w1, w2, x))
        assert seen["done"] == 0 and seen["after"] == seen["before"], (static, min_bytes, seen)
