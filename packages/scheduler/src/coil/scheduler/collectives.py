"""Functional collectives among a schedule's steps: which steps launch one, which wait for one,
and what a collective still reads while it is in flight.

A traced collective (`torch.distributed._functional_collectives`, FSDP2, tensor parallelism) is
two ATen calls, both extern steps: the launch (`_c10d_functional.all_reduce`,
`all_gather_into_tensor`, `reduce_scatter_tensor`, ...) returns at once with its result buffer
being filled asynchronously, and `_c10d_functional.wait_tensor(result)` blocks until it is. Two
rules follow:

- every rank must launch the same collectives in the same order (otherwise they pair up wrongly
  or hang): no reordering may swap two launches (`launch_steps`, in program order);
- a launch reads its inputs until its wait returns (NCCL reads them on its own stream), so they
  must stay alive and unwritten until then (`in_flight_reads`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from coil.lowering_ir import Buffer, ExternKernel, ReinterpretView

WAIT = "_c10d_functional::wait_tensor"
LAUNCHES = frozenset({
    "_c10d_functional::all_reduce", "_c10d_functional::all_reduce_coalesced",
    "_c10d_functional::all_gather_into_tensor", "_c10d_functional::all_gather_into_tensor_coalesced",
    "_c10d_functional::all_gather_into_tensor_out",
    "_c10d_functional::reduce_scatter_tensor", "_c10d_functional::reduce_scatter_tensor_coalesced",
    "_c10d_functional::all_to_all_single", "_c10d_functional::broadcast",
})


def op_name(step: Any) -> str | None:
    """The ATen schema name of an extern step (`_c10d_functional::wait_tensor`), else None."""
    if not isinstance(step, ExternKernel):
        return None
    schema = getattr(step.kernel, "_schema", None)
    name = getattr(schema, "name", None)
    return name if isinstance(name, str) else None


def is_launch(step: Any) -> bool:
    """Whether `step` launches a functional collective."""
    return op_name(step) in LAUNCHES


def is_wait(step: Any) -> bool:
    """Whether `step` waits for a functional collective (`wait_tensor`)."""
    return op_name(step) == WAIT


def launch_steps(steps: Sequence[Any]) -> list[int]:
    """Indices of the steps that launch a collective, in order."""
    return [i for i, st in enumerate(steps) if is_launch(st)]


def _storage(x: Any) -> str | None:
    if isinstance(x, ReinterpretView):
        return x.storage.name
    return x.name if isinstance(x, Buffer) else None


def waited_launch(steps: Sequence[Any]) -> dict[int, int]:
    """Each wait step's index -> the index of the launch whose result it waits for (a wait whose
    argument no launch among `steps` wrote is left out)."""
    writer: dict[str, int] = {}
    out: dict[int, int] = {}
    for i, st in enumerate(steps):
        if is_wait(st) and st.args:
            arg = _storage(st.args[0])
            if arg is not None and arg in writer:
                out[i] = writer[arg]
        if is_launch(st):
            for b in st.outputs:
                writer[b.name] = i
    return out


def in_flight_reads(steps: Sequence[Any]) -> dict[int, list[str]]:
    """Each wait step's index -> the buffers its collective reads: they are read until the wait."""
    return {w: list(steps[launch].reads()) for w, launch in waited_launch(steps).items()}
