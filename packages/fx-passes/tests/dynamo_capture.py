"""The tests' way to get a Dynamo graph: the torch-IR graph module Dynamo hands a backend."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.fx import GraphModule


def capture(fn: Callable[..., Any], *args: Any, dynamic: bool = False) -> tuple[GraphModule, list[Any]]:
    """Dynamo's graph of `fn` called on `args` (one graph: `fullgraph=True`; symbolic sizes
    with `dynamic`) and the example inputs it came with."""
    got: list[tuple[GraphModule, list[Any]]] = []

    def backend(gm: GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        got.append((gm, list(example_inputs)))
        return gm.forward

    torch._dynamo.reset()
    torch.compile(fn, backend=backend, dynamic=dynamic, fullgraph=True)(*args)
    return got[0]
