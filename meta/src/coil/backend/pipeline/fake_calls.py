"""Calls of a compiled graph with FakeTensors, which DDP's graph splitting makes.

Dynamo's DDPOptimizer compiles a DDP module's graph bucket by bucket, and after compiling one
bucket it calls the compiled callable under its FakeTensorMode (parameters real, activations
fake) for the output metadata the next bucket is compiled against. It marks these compiles with
`TracingContext.fakify_first_call`, through an object whose `__del__` clears the flag: an
earlier bucket's marker collected late (held by a reference cycle) clears it in the middle of a
later bucket's compile, so the split's own `TracingContext.ddp_optimizer_ctx` counts too. coil's
callables launch kernels and read addresses, which fake tensors do not have;
`answering_fake_calls` wraps such a graph's callable so that a call made while a FakeTensorMode
is active runs the fx graph on the fake values instead, with each output given the strides
coil's kernels return.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

__all__ = ["answering_fake_calls", "fake_calls_expected"]


def fake_calls_expected() -> bool:
    """Whether the graph being compiled may be called with FakeTensors (DDPOptimizer's split)."""
    context = torch._guards.TracingContext.try_get()
    marked = bool(getattr(context, "fakify_first_call", False))
    return marked or getattr(context, "ddp_optimizer_ctx", None) is not None


def _fake_mode_active() -> bool:
    return torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.FAKE) is not None


def answering_fake_calls(call: Callable[[list[Any]], Any], gm: torch.fx.GraphModule,
                         strides: Sequence[Sequence[int] | None] | None) -> Callable[[list[Any]], Any]:
    """The boxed callable that runs `call`, or, while a FakeTensorMode is active, `gm` on the
    (fake) arguments, its tensor outputs restrided to `strides` (each output's, None where it
    is not a tensor or its strides are symbolic): the layout `call` returns them in."""
    def run(args: list[Any]) -> Any:
        if not _fake_mode_active():
            return call(args)
        a = list(args)
        args.clear()
        outs = gm(*a)
        if strides is None:
            return outs
        return type(outs)(o.as_strided(o.shape, s) if isinstance(o, torch.Tensor) and s is not None
                          and tuple(o.stride()) != tuple(s) else o
                          for o, s in zip(outs, strides, strict=True))

    run._boxed_call = True  # type: ignore[attr-defined]
    return run
