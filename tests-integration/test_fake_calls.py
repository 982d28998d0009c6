"""A compiled graph called with FakeTensors, as DDP's graph splitting calls each bucket's graph.

DDPOptimizer compiles under `TracingContext.fakify_first_call` and then calls the compiled graph
in its FakeTensorMode, parameters real and activations fake, for the metadata of the next
bucket's inputs. The call must answer with fake outputs of the layout the real call returns,
launching nothing; real calls after it run the compiled code. DDPOptimizer clears the flag in a
marker's `__del__`, so a marker of an earlier bucket collected late clears it in the middle of a
later bucket's compile: the split's own context (`ddp_optimizer_ctx`) must be enough.
"""

from __future__ import annotations

import pytest
import torch
from coil.backend import compile_graph
from coil.lowering_ir import decomposition_table
from torch._dynamo.backends.distributed import DDPOptimizerContext
from torch._guards import TracingContext, tracing
from torch._subclasses import FakeTensor, FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx


def _bucket(w: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """A split graph's shape: a parameter, an activation; outputs transposed and broadcast."""
    h = torch.tanh(x @ w)
    return (h.t(), h.sum(1, keepdim=True).expand(-1, 8), h)


@pytest.mark.parametrize("marked_by", ["fakify_first_call", "ddp_optimizer_ctx"])
def test_a_fake_call_answers_with_the_real_calls_layout(device: torch.device, marked_by: str) -> None:
    w, x = torch.randn(8, 8, device=device), torch.randn(16, 8, device=device)
    gm = make_fx(_bucket, decomposition_table=decomposition_table(), tracing_mode="fake")(w, x)
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    context = TracingContext(mode)
    with tracing(context):
        if marked_by == "fakify_first_call":
            context.fakify_first_call = True
        else:  # the flag already cleared by a late-collected marker; the split's context remains
            context.ddp_optimizer_ctx = DDPOptimizerContext()
        call = compile_graph(gm, [w, x], kind="inference")
        fake_x = mode.from_tensor(x)
        with mode:
            fakes = call([w, fake_x])  # the parameter real, the activation fake
    real = call([w, x])
    want = _bucket(w, x)
    for f, r, e in zip(fakes, real, want, strict=True):
        assert isinstance(f, FakeTensor)
        assert (f.shape, f.stride(), f.dtype) == (r.shape, r.stride(), r.dtype)
        torch.testing.assert_close(r, e)
    again = call([w, x + 1])  # later real calls run the compiled graph
    torch.testing.assert_close(again[2], _bucket(w, x + 1)[2])
