"""Graphs that mix a CPU scalar with tensors of the graph's device (coil.lowering_ir.devices).

Eager PyTorch combines a CPU 0-d tensor with CUDA tensors as a scalar and returns each output on
the device it computes it on. coil: a CPU value a CUDA kernel reads is a literal of the kernel
(a constant known at compile time) or a copy made by an explicit ATen step in the wrapper, never
a CPU pointer; copies across devices are ATen steps; CPU outputs stay on the CPU.

Without a GPU the pipeline runs up to the kernels' launch on fake CUDA tensors (post-grad
passes, lowering, scheduling, Triton codegen for CUDA, the device check, wrapper codegen), and
the same programs run end to end on the `device` fixture (the CPU interpreter here; on a GPU the
real mixed-device path) against eager.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from coil.backend import COMPILED
from coil.backend.pipeline.compile import _check_kernel_devices, _device
from coil.fx_passes import run_post_grad_passes
from coil.knobs import knobs
from coil.lowering_ir import decomposition_table, lower
from coil.scheduler import schedule
from coil.triton_codegen import CodegenOptions, generate_schedule
from coil.wrapper_codegen import KernelLaunch, build, emit_python
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx


class SlidingWindowMask(torch.nn.Module):
    """The pattern of transformers' sliding-window attention masks: `torch.tensor(self.sliding_window)`
    built without a device, compared with positions on the model's device."""

    sliding_window = 3

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(scores.shape[-1], device=scores.device)
        dist = pos[:, None] - pos[None, :]
        allowed = (dist >= 0) & (dist < torch.tensor(self.sliding_window))
        return scores.masked_fill(~allowed, float("-inf")).softmax(-1)


@dataclass(frozen=True)
class Form:
    """A program, its inputs on a device, and what the CUDA wrapper must hold: the literal a
    kernel takes for a CPU constant, or an explicit copy of a CPU value to the GPU."""

    fn: Callable[..., Any]
    inputs: Callable[[torch.device], tuple[torch.Tensor, ...]]
    literal: str | None = None
    copies_to_gpu: bool = False


def _x(device: torch.device) -> torch.Tensor:
    return torch.randn(4, 8, device=device)


FORMS = {
    "constant_scale": Form(lambda x: x * torch.tensor(0.5), lambda d: (_x(d),), literal="0.5"),
    "where_constant": Form(lambda m, x: torch.where(m, x, torch.tensor(0.0)),
                           lambda d: (_x(d) > 0, _x(d)), literal="0.0"),
    "returned_constant": Form(lambda x: (x + 1, torch.tensor(7)), lambda d: (_x(d),)),
    "cpu_scalar_input": Form(lambda x, s: (x * s, (x - s).sum(1)), lambda d: (_x(d), torch.tensor(2.5)),
                             copies_to_gpu=True),
    "to_cpu": Form(lambda x: (x.to("cpu") + 1, x.sum().cpu(), x * 2), lambda d: (_x(d),)),
    "to_device": Form(lambda x, s: x + s.to(x.device), lambda d: (_x(d), torch.tensor(1.5)),  # .cuda() on a GPU
                      copies_to_gpu=True),
    "sliding_window": Form(SlidingWindowMask(), lambda d: (torch.randn(2, 6, 6, device=d),), literal="3"),
    # a CPU constant moved to the graph's device (DeBERTa-v2's log buckets: `torch.tensor(mid - 1)
    # .type_as(relative_pos)`; made with `full` here, which fake tracing keeps off the device)
    "constant_moved": Form(lambda r: torch.where((r < 4) & (r > -4), torch.full((), 3, dtype=torch.int64).to(r.device),
                                                 r.abs()),
                           lambda d: (torch.arange(-8, 8, device=d).view(4, 4),), literal="3"),
    "constant_moved_scale": Form(lambda x: x * torch.full((), 0.25).to(x.device), lambda d: (_x(d),), literal="0.25"),
}


def _outputs(value: Any) -> list[Any]:
    return list(value) if isinstance(value, tuple | list) else [value]


@pytest.mark.parametrize("name", sorted(FORMS))
def test_cuda_kernels_take_no_cpu_pointer(name: str) -> None:
    form = FORMS[name]
    with FakeTensorMode(allow_non_fake_inputs=True):
        inputs = form.inputs(torch.device("cuda", 0))
    def program(*args: torch.Tensor) -> tuple[Any, ...]:
        return tuple(_outputs(form.fn(*args)))  # AOTAutograd's graphs return a tuple

    gm = make_fx(program, decomposition_table=decomposition_table(), tracing_mode="fake")(*inputs)
    gm = run_post_grad_passes(gm, is_backward=False)
    lowered = lower(gm, name)
    sched = schedule(lowered)
    device = _device(lowered)
    assert device.type == "cuda"
    bufs = lowered.buffers()
    sources = generate_schedule(sched, bufs, "cuda", "looped", lowered.symbol_hints, CodegenOptions())
    _check_kernel_devices(sources, lowered, device)  # the pipeline's own check: raises on a CPU pointer
    for ks in sources:
        assert all(bufs[b].layout.device.type == "cuda" for b in ks.pointer_args), (ks.name, ks.pointer_args)
    launches = {s.name: KernelLaunch(s.name, s.pointer_args, s.size_args, s.grid) for s in sources}
    program = build(sched, launches)
    wrapper = emit_python(program.lines, [s.name for s in sources], sorted(program.constants), name)
    copies = "aten._to_copy.default(" in wrapper and "device=torch.device('cuda:0')" in wrapper
    assert copies == form.copies_to_gpu, wrapper
    if form.literal is not None:
        assert any(f"tl.full([1], {form.literal}," in ks.source for ks in sources), [ks.source for ks in sources]
    # every output is on the device eager computes it on
    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    want = [a.meta["val"].device.type for a in out_node.args[0]]
    assert [o.layout.device.type for o in lowered.outputs] == want


@pytest.mark.parametrize("name", sorted(FORMS))
def test_values_match_eager(name: str, device: torch.device) -> None:
    form = FORMS[name]
    inputs = form.inputs(device)
    want = _outputs(form.fn(*inputs))
    with knobs.override(fallback_on_error=False), torch.no_grad():
        got = _outputs(torch.compile(form.fn, backend="coil")(*inputs))
    assert COMPILED and all(s.eager_fallback is None for s in COMPILED)
    assert [g.device for g in got] == [w.device for w in want]
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)
