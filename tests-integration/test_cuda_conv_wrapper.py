"""A CUDA convolution with a bias, through coil's pipeline on fake CUDA tensors up to the wrapper.

The convolution runs without its bias through torch's Python binding (`torch.convolution`, the
cheaper call), and the bias is added by the generated kernel that applies the activation: no
separate ATen add, no extra launch. The values are checked end to end on the `device` fixture.
"""

from __future__ import annotations

import re

import torch
import torch.nn.functional as F
from coil.fx_passes import run_post_grad_passes
from coil.knobs import knobs
from coil.lowering_ir import decomposition_table, lower
from coil.scheduler import schedule
from coil.triton_codegen import CodegenOptions, generate_schedule
from coil.wrapper_codegen import KernelLaunch, build, emit_python
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx


def conv_block(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor]:
    return (F.hardswish(F.conv2d(x, w, b, padding=1)),)


def _inputs(device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    x = torch.randn(2, 8, 6, 6, device=device).to(memory_format=torch.channels_last)
    return x, torch.randn(16, 8, 3, 3, device=device), torch.randn(16, device=device)


def test_bias_fuses_into_the_consumer_kernel() -> None:
    with FakeTensorMode(allow_non_fake_inputs=True):
        inputs = _inputs(torch.device("cuda", 0))
    gm = make_fx(conv_block, decomposition_table=decomposition_table(), tracing_mode="fake")(*inputs)
    gm = run_post_grad_passes(gm, is_backward=False)
    lowered = lower(gm, "conv_block")
    sched = schedule(lowered)
    sources = generate_schedule(sched, lowered.buffers(), "cuda", "looped", lowered.symbol_hints, CodegenOptions())
    launches = {s.name: KernelLaunch(s.name, s.pointer_args, s.size_args, s.grid) for s in sources}
    program = build(sched, launches)
    wrapper = emit_python(program.lines, [s.name for s in sources], sorted(program.constants), "conv_block")
    calls = re.findall(r"= (torch[\w.]*)\((\w+), (\w+), (\w+),", wrapper)
    assert [(fn, bias) for fn, _x, _w, bias in calls] == [("torch.convolution", "None")], wrapper
    assert "aten.add" not in wrapper
    assert len(sources) == 1, [s.name for s in sources]  # bias add + hardswish: one kernel
    assert "arg2" in sources[0].pointer_args, sources[0].pointer_args  # it reads the bias


def test_values_match_eager(device: torch.device) -> None:
    inputs = _inputs(device)
    want = conv_block(*inputs)[0]
    with knobs.override(fallback_on_error=False), torch.no_grad():
        got = torch.compile(conv_block, backend="coil")(*inputs)[0]
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert got.stride() == want.stride()
