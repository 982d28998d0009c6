"""How long one kernel launch takes: the timer autotuning uses (`measure`).

On a GPU: a few warm-up launches, an estimate, then a short loop of launches each timed by a pair
of CUDA events on the current stream, with the L2 cache flushed before each (a buffer twice the
L2 size zeroed), so a kernel is timed reading its inputs from HBM, as it mostly does inside a
model; the median. Under the interpreter (or on the CPU): wall-clock time of a few launches, the
median (meaningless as a speed figure; autotuning runs there only when forced, for tests).

`measure_call(fn, device)` times any callable the same way (an ATen call a generated kernel
competes with). Both are looked up as module attributes at each call (`timing.measure(...)`),
so tests may replace them (`monkeypatch.setattr(coil.runtime.timing, "measure", fake)`) to make
a chosen candidate "fastest" deterministically.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from coil.runtime.kernel import Kernel

WARMUP = 3          # launches before timing (the first may bind the fast launcher)
MIN_REPS = 10       # timed launches: at least this many,
MAX_REPS = 50       # at most this many,
TARGET_MS = 5.0     # aiming at about this much kernel time per candidate
INTERPRETED_REPS = 3
MIN_FLUSH_BYTES = 64 << 20


def measure(kernel: Kernel, grid: tuple[int, ...], args: Sequence[object]) -> float:
    """Median milliseconds of one launch of `kernel` over `grid` with `args` (see the module
    docstring). Runs the kernel many times: its outputs (and in-place arguments) are overwritten."""
    def launch() -> None:
        kernel(grid, *args)

    if kernel.interpreted or kernel.device.type != "cuda":
        return _wall_ms(launch)
    return _cuda_ms(launch, kernel.device)


def measure_call(fn: Callable[[], object], device: torch.device) -> float:
    """Median milliseconds of one call of `fn`, the work it queues on `device` timed as a kernel
    launch is by `measure` (CUDA events around each call, L2 flushed before it; wall-clock time
    off a CUDA device): an ATen call an alternative to a generated kernel runs, say."""
    if device.type != "cuda":
        return _wall_ms(fn)
    return _cuda_ms(fn, device)


def _wall_ms(fn: Callable[[], object]) -> float:
    fn()
    times = []
    for _ in range(INTERPRETED_REPS):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def _cuda_ms(fn: Callable[[], object], device: torch.device) -> float:
    import torch

    with torch.cuda.device(device):
        props = torch.cuda.get_device_properties(device)
        flush_bytes = max(MIN_FLUSH_BYTES, 2 * int(getattr(props, "L2_cache_size", 0)))
        flush = torch.empty(flush_bytes, dtype=torch.int8, device=device)
        for _ in range(WARMUP):
            fn()
        start, end = _event(), _event()
        torch.cuda.synchronize()
        start.record()
        for _ in range(WARMUP):
            fn()
        end.record()
        torch.cuda.synchronize()
        estimate = max(start.elapsed_time(end) / WARMUP, 1e-3)
        reps = min(MAX_REPS, max(MIN_REPS, int(TARGET_MS / estimate)))
        starts = [_event() for _ in range(reps)]
        ends = [_event() for _ in range(reps)]
        for s, e in zip(starts, ends, strict=True):
            flush.zero_()
            s.record()
            fn()
            e.record()
        torch.cuda.synchronize()
        del flush
        return float(statistics.median(float(s.elapsed_time(e)) for s, e in zip(starts, ends, strict=True)))


def _event() -> Any:
    import torch

    return torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
