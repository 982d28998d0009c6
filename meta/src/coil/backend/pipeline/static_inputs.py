"""Which inputs of a forward or inference graph a CUDA graph may use in place: Dynamo's static
inputs (a module's parameters and buffers).

The CUDA-graph runner (coil.runtime.cudagraph) treats every `nn.Parameter` input as static by
itself. A module's buffers are plain tensors, so without this list each replay copied every
buffer into the graph's own memory and, where the graph mutates it (batch norm's running mean,
running variance and step count: AOTAutograd's `copy_` epilogue), copied it back out: on
ResNet-50's training step 318 device-to-device copies per step, against none in place.

`dynamo_static_inputs(example_inputs, kind)` reads the list AOTAutograd computed for the graph
being compiled (`TracingContext.fw_metadata.static_input_indices`, the inputs Dynamo marked
static). Contract:

- forward and inference graphs only (a backward's inputs are saved values and tangents; its
  parameters are `nn.Parameter`s, static by themselves): `()` for a backward;
- `()` outside a Dynamo compile (no tracing context, as `compile_graph` called directly) and when
  the graph's inputs do not line up one to one with the flat inputs the list indexes (AOTAutograd
  added some: RNG state, tensor subclasses' inner tensors);
- otherwise the indices whose example input is a tensor, ascending.

`marked_static(gm, example_inputs)` gives the same list without AOTAutograd, from the Dynamo
graph's placeholders (`meta["tensor_dict"]["_dynamo_static_input_type"]`, the mark AOTAutograd
reads to build `static_input_indices`), for a graph whose inputs are the Dynamo graph's one to
one (a frontend-cache hit, coil.backend.caches.frontend_cache); `()` when the counts differ.

A static input must keep its address across calls: if one moves (the user assigned a new buffer),
the runner stops replaying, with one warning, and runs its graph's kernels directly.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.fx

__all__ = ["dynamo_static_inputs", "marked_static"]


def dynamo_static_inputs(example_inputs: Sequence[Any], kind: str) -> tuple[int, ...]:
    """The inputs of the graph being compiled that Dynamo marked static (module docstring)."""
    if kind not in ("forward", "inference"):
        return ()
    ctx = torch._guards.TracingContext.try_get()
    meta = getattr(ctx, "fw_metadata", None) if ctx is not None else None
    if meta is None or len(meta.input_info) != len(example_inputs):
        return ()
    return tuple(sorted(i for i in set(meta.static_input_indices)
                        if 0 <= i < len(example_inputs) and isinstance(example_inputs[i], torch.Tensor)))


def marked_static(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> tuple[int, ...]:
    """The inputs of Dynamo graph `gm` that Dynamo marked static (module docstring)."""
    nodes = list(gm.graph.find_nodes(op="placeholder"))
    if len(nodes) != len(example_inputs):
        return ()
    return tuple(i for i, n in enumerate(nodes)
                 if n.meta.get("tensor_dict", {}).get("_dynamo_static_input_type") is not None
                 and isinstance(example_inputs[i], torch.Tensor))
