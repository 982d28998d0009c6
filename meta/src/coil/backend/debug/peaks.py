"""Measured allocated peaks of compiled graphs, held against the memory planner's prediction.

`measure_peaks(True)` (exported as `coil.backend.measure_peaks`) switches measuring on for the
whole process: each compiled graph that runs on CUDA as plain launches then measures its first
`MEASURED_CALLS` calls made while the switch is on and keeps the largest figure in
`GraphStats.measured_peak`. `measure_peaks(False)` switches it off again.

What the prediction counts. `GraphStats.planned_peak[1]` is the memory planner's peak of live
bytes (`coil.memory_planner.peak_of_order` over `coil.scheduler.planner_graph`) for the step
order the wrapper runs: the graph inputs and constants some step reads, live for the whole call
(`GraphStats.planned_inputs`), plus every storage buffer a step writes (a kernel group's stores,
an extern's or a scatter's outputs), sized `storage_extent * itemsize`, live from the step that
writes it to the last step that reads it, graph outputs to the end. A kernel group's fused
intermediates are never materialised and do not count; views count as their storage. Not
counted: memory an extern or an ATen fallback allocates for itself inside the call (cuDNN
convolution workspace, a fallback's temporaries; cuBLAS's workspace is allocated once per
stream and held, so a warm call does not allocate it), the caching allocator's rounding (blocks
are multiples of 512 bytes, and a large block is not split when at most 1 MiB would remain),
and the few bytes of a backward's pointer table of tangents. Buffer reuse (equal sizes only,
never above the unplanned peak) does not change the figure.

Inputs a call releases. The wrapper drops its reference to each input after the last step that
reads it; when nobody else holds that input (a backward's saved activations, which autograd hands
over and forgets), its memory is freed right there, and the call's peak is lower than the
planner's figure, which keeps every input to the end. So a measured call also gets its own
prediction, `GraphStats.measured_planned`: from the order's profile (`planned_profile`: bytes of
written buffers live at each step, and each input's size and last reading step), the largest over
steps of the written bytes live less the bytes of the released inputs already read for the last
time (`planned_growth_of`). An input counts as released when the argument list holds the only
reference to its tensor and that tensor the only one to its storage (`released_inputs`).

What a measurement is. Before the call: `torch.cuda.memory_allocated(device)` and
`torch.cuda.reset_peak_memory_stats(device)`; after it: `torch.cuda.max_memory_allocated(device)`
minus the first figure, i.e. the most the call allocated beyond what was held before it. The
outputs it returns are still allocated when it returns and so are counted, as the planner counts
outputs live to the end. The inputs were allocated before the call, so the figure to compare
is `GraphStats.planned_growth` (the planned peak less `planned_inputs`). No synchronisation:
the allocator's statistics are kept on the host, as allocations are made.

Where it measures. Only a graph run as plain launches: a CUDA-graph replay allocates nothing
(it runs in its pool's memory, reserved at capture), so peaks are measured with CUDA graphs off
(coil bench's coil_nocg mode: `options={"cuda_graphs": False, "cuda_graphs_training": False}`),
never during a capture of the current stream, and never on the CPU (Triton's interpreter: no
allocator statistics). Switched off, a call costs one check of a module-level bool. Each
measured call resets the device's peak statistic: a caller measuring a peak across calls
switches measuring off first.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from coil.backend.stats import GraphStats

if TYPE_CHECKING:
    import torch

__all__ = ["MEASURED_CALLS", "measure_peaks", "measured_call", "planned_growth_of", "released_inputs"]

# calls a graph measures while the switch is on; later calls only count against this
MEASURED_CALLS = 3
# the process-wide switch (`measure_peaks`); compiled callables read it on every call
ON = False


def measure_peaks(enabled: bool) -> None:
    """Switch the measuring of compiled graphs' allocated peaks on or off, process-wide (module
    docstring). While on, each CUDA graph run without CUDA-graph replay records the largest
    allocated peak of its first `MEASURED_CALLS` calls in `GraphStats.measured_peak`."""
    global ON
    ON = bool(enabled)


def planned_growth_of(profile: tuple[list[int], list[tuple[int, int, int]]], released: set[int]) -> int:
    """The planned growth of a call that releases the inputs at positions `released`: over the
    steps t, the most of `step_bytes[t]` less the bytes of released inputs whose last reading
    step is before t (each is freed right after it)."""
    step_bytes, inputs = profile
    freed_after = [0] * (len(step_bytes) + 1)
    for position, nbytes, last in inputs:
        if position in released and last + 1 < len(freed_after):
            freed_after[last + 1] += nbytes
    best = freed = 0
    for t, live in enumerate(step_bytes):
        freed += freed_after[t]
        best = max(best, live - freed)
    return best


def released_inputs(args: list[Any], positions: Sequence[int]) -> set[int]:
    """The `positions` of `args` whose tensor nothing but `args` references (the Python object:
    the list's slot alone; its storage: that tensor alone), so the call frees it."""
    import torch

    out = set()
    for k in positions:
        t = args[k]
        # the list's slot, `t` and getrefcount's own argument; the storage: the tensor and `storage`
        if isinstance(t, torch.Tensor) and sys.getrefcount(t) <= 3:
            storage = t.untyped_storage()
            if torch._C._storage_Use_Count(storage._cdata) <= 2:
                out.add(k)
            del storage
        del t
    return out


def measured_call(fn: Callable[[list[Any]], Any], args: list[Any], stats: GraphStats,
                  device: torch.device) -> Any:
    """`fn(args)`, measuring its allocated peak on `device` into `stats` (module docstring)
    unless `stats` holds `MEASURED_CALLS` measurements already or the current stream is being
    captured into a CUDA graph; with a profile of the order, also the planned growth given the
    inputs this call releases (`measured_planned`, of the call with the largest peak)."""
    import torch

    if stats.measured_calls >= MEASURED_CALLS or torch.cuda.is_current_stream_capturing():
        return fn(args)
    profile = stats.planned_profile
    released = released_inputs(args, [k for k, _, _ in profile[1]]) if profile is not None else set()
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    result = fn(args)
    peak = torch.cuda.max_memory_allocated(device) - before
    stats.measured_calls += 1
    if stats.measured_peak is None or peak >= stats.measured_peak:
        stats.measured_peak = peak
        if profile is not None:
            stats.measured_planned = planned_growth_of(profile, released)
            stats.measured_released = sum(n for k, n, _ in profile[1] if k in released)
    return result
