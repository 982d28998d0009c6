"""The CUDA streams and device state around CUDA-graph warm-ups, captures and replays.

Every `CudaGraphRunner` on a device warms up and captures on one shared side stream
(`side_stream`): the caching allocator caches blocks per stream, so a stream per runner would
hold them once per runner; cuBLAS's workspaces are dropped around each warm-up and capture
(`blas_workspaces_dropped`). Replays run on the caller's
current stream; `after_last_replay` orders a call from another stream after the last replay.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

log = logging.getLogger("coil.runtime")

_SIDE_STREAMS: dict[int, Any] = {}
_LAST_REPLAY: dict[int, tuple[int, Any]] = {}  # device index -> the last replay's stream (raw handle, object)


def side_stream(device: torch.device) -> torch.cuda.Stream:
    """The side stream every runner on `device` warms up and captures on."""
    import torch

    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _SIDE_STREAMS:
        _SIDE_STREAMS[index] = torch.cuda.Stream(index)  # type: ignore[no-untyped-call]
    stream: torch.cuda.Stream = _SIDE_STREAMS[index]
    return stream


def after_last_replay(device: torch.device) -> None:
    """Order the current stream after the last replay on `device` when that ran on another stream.

    A replay writes graph memory from the current stream before the graph runs: copied inputs into
    their static buffers, a pointer table's addresses, and then the static outputs and pool memory
    the graph itself writes. An earlier replay enqueued on another stream may still be reading or
    writing the same memory (its static inputs, the table, the pool's buffers, a clone of its
    outputs), and nothing else orders the two streams. So a call from a new stream waits for all
    the work enqueued on the last one (`Stream.wait_stream`, an event on the GPU; the host does not
    block). Calls that stay on one stream, the usual case, pay one comparison of raw stream
    handles (no stream object is made)."""
    import torch

    key = device.index if device.index is not None else torch.cuda.current_device()
    raw = torch._C._cuda_getCurrentRawStream(key)
    last = _LAST_REPLAY.get(key)
    if last is not None and last[0] == raw:
        return
    current = torch.cuda.current_stream(key)
    if last is not None:
        current.wait_stream(last[1])
    _LAST_REPLAY[key] = (raw, current)


@contextlib.contextmanager
def blas_workspaces_dropped() -> Iterator[None]:
    """torch's cached cuBLAS workspaces freed on entry and on exit (every handle and stream).

    cuBLAS keeps one workspace per handle and stream, made at the first matmul there and kept.
    Made in a warm-up it would pin a segment of the side stream's freed warm-up buffers; found
    cached at a capture, the graph would read and write that memory of the ordinary pool at every
    replay, for good. Dropped around each warm-up and capture, a capture makes its own workspace
    from the graph's pool, and it is freed there at the end like the graph's other scratch
    buffers (later captures into the pool may reuse it, under the pool's rules); a warm-up's is
    freed when the warm-up ends. Other streams make theirs again at their next matmul. A torch
    without `_cuda_clearCublasWorkspaces` keeps its workspaces (nothing is done)."""
    import torch

    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear is not None:
        clear()
    try:
        yield
    finally:
        if clear is not None:
            clear()


def generators_out_of_capture() -> None:
    """After a failed capture: every CUDA device's default generator gets a copy of its state
    (same seed and offset) that is not marked as capturing.

    When an op invalidates a capture (a host sync, a cuSOLVER info check), torch's
    `CUDAGraph.capture_end` raises at cudaStreamEndCapture before its generator epilogue, and the
    generator stays marked: every later random op in the process would fail with "Offset
    increment outside graph capture encountered unexpectedly"."""
    import torch

    for gen in torch.cuda.default_generators:
        try:
            gen.graphsafe_set_state(gen.clone_state())
        except (AttributeError, RuntimeError) as exc:  # an older torch without graph-safe states
            log.debug("CudaGraphRunner: generator state not replaced (%s)", exc)


def record_stream(t: torch.Tensor, stream: torch.cuda.Stream) -> None:
    """`t.record_stream(stream)`, also for a tensor with a lazy conjugate or negative bit (an
    fft's output can be a conjugate view), where torch's record_stream fails with "Expected
    Tensor but got None": the bit is dropped through a view over the same memory, which is what
    the caching allocator tracks."""
    import torch

    if t.is_conj():
        t = t.conj()  # the conjugate of a conjugate view: the same memory, the bit cleared
    if t.is_neg():
        t = torch._neg_view(t)
    t.record_stream(stream)
