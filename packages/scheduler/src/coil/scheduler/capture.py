"""Which schedule steps a CUDA graph cannot capture: the one place this rule lives.

A CUDA graph records device work once and replays it; anything that needs the host while it runs
(reading a device value, sizing an allocation from data, touching CPU memory) either fails during
capture or is frozen into the graph with the values it saw then. The rule, per step:

- **Kernels** (`KernelGroup`, `Scatter`): capturable. They are Triton launches on the graph's
  device with sizes fixed at compile time.
- **Externs** (`ExternKernel`, deliberate ones such as mm/addmm/bmm/convolution through cuBLAS/
  cuDNN, and ATen fallbacks alike) are capturable unless one of these holds:
  1. *data-dependent output shape*: the op carries `torch.Tag.dynamic_output_shape` (nonzero,
     masked_select, unique, bincount, repeat_interleave.Tensor, ...). Its kernel may size the
     result from the data, which needs a device-to-host sync, even when the traced shape came out
     static (repeat_interleave with `output_size`). The one exception is `aten.index.Tensor`
     whose results have static sizes: integer indices, a gather with no sync (a boolean mask is
     turned into `nonzero` before it reaches the graph).
  2. *host sync*: the op carries `torch.Tag.data_dependent_output` (`_local_scalar_dense`,
     `item`: a device value read on the host), or is in `HOST_SYNC_OPS` (ops returning a Python
     value computed from tensor data, e.g. `equal`), or is a `histc` whose `min` equals its
     `max` (its CUDA kernel then reads the data's range on the host; with a range given, as a
     mixture-of-experts router counts its experts, it runs without a sync).
  3. *another device*: a tensor argument or result on another device than the graph's (a CPU
     tensor in a CUDA graph: a host copy, or a CPU scalar read once at capture and replayed
     stale), or a `device=` argument naming another device.
  4. *an explicit generator*: a random op (`torch.Tag.nondeterministic_seeded`) with a
     `generator=` argument. Random ops on the default CUDA generator are capturable: torch
     registers that generator with every capture and each replay advances its Philox offset, so
     replays draw fresh numbers (coil's own random kernels take their seed from such an op,
     `aten.randint`). A user generator would have to be registered with the graph by hand.
  5. *a higher-order op* (`torch.ops.higher_order.*`, e.g. `with_effects`): it runs Python that
     the rule cannot see into.
  6. *a functional collective* (its launch or its `wait_tensor`, `coil.scheduler.collectives`):
     c10d keeps host-side state per call (the work handle the wait looks up), which a replay
     does not run, and coil has not yet checked NCCL calls inside its captures on GPUs; the
     collectives run between captured segments.
- **The whole graph** (`graph_blocker`) cannot be captured when its shapes are dynamic (a
  symbolic size: every replay would need the sizes of the capture) or when it has no CUDA tensor.

`capture_blockers(schedule)` maps each step that cannot be captured to the reason (a string
naming the op and the rule), relative to the graph's device (`graph_device`). It is pure logic
over the schedule (no CUDA needed), so it is tested on the CPU with CUDA layouts.
"""

from __future__ import annotations

from typing import Any

import sympy
import torch
from coil.lowering_ir import Buffer, ExternKernel, LoweredGraph, ReinterpretView, SymbolInput
from coil.scheduler.collectives import is_launch, is_wait
from coil.scheduler.schedule import Schedule, Step

# ops that read device data on the host although no tag says so: Python values computed from
# tensor data (equal, is_nonzero, allclose); histc does when min == max (`_reads_data_range`)
HOST_SYNC_OPS = frozenset({"aten.equal", "aten.is_nonzero", "aten.allclose"})
# dynamic_output_shape ops whose static-shaped results need no sync (see rule 1)
STATIC_WHEN_SIZED = frozenset({"aten.index.Tensor"})


def graph_device(graph: LoweredGraph) -> torch.device:
    """The graph's device: its CUDA device if any buffer is on one, else the CPU."""
    devices = [b.layout.device for b in graph.buffers().values()]
    cuda = [d for d in devices if d.type == "cuda"]
    return cuda[0] if cuda else torch.device("cpu")


def graph_blocker(graph: LoweredGraph) -> str | None:
    """Why `graph` as a whole cannot be captured (dynamic shapes, no CUDA tensor), or None."""
    if graph.symbol_hints or any(isinstance(b, SymbolInput) for b in graph.inputs):
        return f"{graph.name} has dynamic shapes (sizes {sorted(map(str, graph.symbol_hints))})"
    if graph_device(graph).type != "cuda":
        return f"{graph.name} has no CUDA tensor"
    return None


def _packet(op: Any) -> str:
    name = getattr(op, "_schema", None)
    if name is None:
        return str(op)
    return str(op._schema.name).replace("::", ".")


def _static(layout_sizes: tuple[Any, ...]) -> bool:
    return all(isinstance(sympy.sympify(s), sympy.Integer) for s in layout_sizes)


def _tensors(x: Any) -> list[Buffer | ReinterpretView]:
    if isinstance(x, Buffer | ReinterpretView):
        return [x]
    if isinstance(x, list | tuple):
        return [t for y in x for t in _tensors(y)]
    if isinstance(x, dict):
        return [t for y in x.values() for t in _tensors(y)]
    return []


def _same_device(a: torch.device, b: torch.device) -> bool:
    return a.type == b.type and (a.index is None or b.index is None or a.index == b.index)


def _reads_data_range(step: ExternKernel) -> bool:
    """A `histc` whose range is not given (min == max, the default 0 and 0, or not a number
    known now): its CUDA kernel reads the data's minimum and maximum on the host."""
    if _packet(step.kernel) != "aten.histc":
        return False
    bounds = [step.args[i] if len(step.args) > i else step.kwargs.get(name, 0) for i, name in ((2, "min"), (3, "max"))]
    return not all(isinstance(b, int | float) for b in bounds) or bounds[0] == bounds[1]


def capture_blocker(step: Step, device: torch.device) -> str | None:
    """Why `step` cannot be captured in a CUDA graph on `device` (see the module docstring), or
    None when it can. The reason names the op and the rule."""
    if not isinstance(step, ExternKernel):
        return None
    op = step.kernel
    name = str(op)
    if isinstance(op, torch._ops.HigherOrderOperator):
        return f"{name}: a higher-order op runs Python the capture cannot see"
    if is_launch(step) or is_wait(step):
        return f"{name}: a functional collective (NCCL calls in a CUDA graph are not verified yet)"
    tags = set(getattr(op, "tags", ()))
    sized = name in STATIC_WHEN_SIZED and all(_static(b.layout.size) for b in step.outputs)
    if torch.Tag.dynamic_output_shape in tags and not sized:
        return f"{name}: data-dependent output shape (its kernel may size the result from the data)"
    if torch.Tag.data_dependent_output in tags or _packet(op) in HOST_SYNC_OPS or _reads_data_range(step):
        return f"{name}: reads a device value on the host (a sync)"
    for t in [*_tensors(step.args), *_tensors(step.kwargs), *step.outputs]:
        if not _same_device(t.layout.device, device):
            return f"{name}: {t.name} is on {t.layout.device}, the graph runs on {device}"
    kw_device = step.kwargs.get("device")
    if isinstance(kw_device, torch.device) and not _same_device(kw_device, device):
        return f"{name}: creates a tensor on {kw_device}, the graph runs on {device}"
    if torch.Tag.nondeterministic_seeded in tags and step.kwargs.get("generator") is not None:
        return f"{name}: draws from an explicit torch.Generator (not registered with the graph)"
    return None


def capture_blockers(sched: Schedule) -> dict[int, str]:
    """Step index -> why that step of `sched` cannot be captured, for every such step."""
    device = graph_device(sched.graph)
    out: dict[int, str] = {}
    for i, st in enumerate(sched.steps):
        why = capture_blocker(st, device)
        if why is not None:
            out[i] = why
    return out
