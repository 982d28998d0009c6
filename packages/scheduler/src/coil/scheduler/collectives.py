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

WAITS = frozenset({"_c10d_functional::wait_tensor", "_c10d_functional::wait_tensors"})  # one tensor; a list
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
    """Whether `step` waits for a functional collective (`wait_tensor`, or `wait_tensors` for a
    coalesced one's results)."""
    return op_name(step) in WAITS


def launch_steps(steps: Sequence[Any]) -> list[int]:
    """Indices of the steps that launch a collective, in order."""
    return [i for i, st in enumerate(steps) if is_launch(st)]


def _storage(x: Any) -> str | None:
    if isinstance(x, ReinterpretView):
        return x.storage.name
    return x.name if isinstance(x, Buffer) else None


def waited_launches(steps: Sequence[Any]) -> dict[int, list[int]]:
    """Each wait step's index -> the indices of the launches whose results it waits for (its
    argument, or each tensor of its list); a wait no launch among `steps` wrote for is left out."""
    writer: dict[str, int] = {}
    out: dict[int, list[int]] = {}
    for i, st in enumerate(steps):
        if is_wait(st) and st.args:
            args = st.args[0] if isinstance(st.args[0], list | tuple) else (st.args[0],)
            names = [_storage(a) for a in args]
            launches = sorted({writer[n] for n in names if n is not None and n in writer})
            if launches:
                out[i] = launches
        if is_launch(st):
            for b in st.outputs:
                writer[b.name] = i
    return out


def in_flight_reads(steps: Sequence[Any]) -> dict[int, list[str]]:
    """Each wait step's index -> the buffers its collectives read: they are read until the wait."""
    return {w: list(dict.fromkeys(r for launch in launches for r in steps[launch].reads()))
            for w, launches in waited_launches(steps).items()}
