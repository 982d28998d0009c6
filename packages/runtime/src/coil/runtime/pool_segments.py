"""Expandable segments for the CUDA-graph pool only, switched on around each capture.

A graph's private pool reserves what its capture allocated, in the caching allocator's ordinary
segments: one `cudaMalloc` per segment, blocks split inside a segment and never merged across two.
A training graph's capture allocates hundreds of buffers of many sizes, so the pool ends up holding
free pieces no later request fits: memory reserved beyond the live peak (docs/perf.md). With
expandable segments the allocator maps physical pages into one growing virtual range per pool and
stream instead, so free neighbours merge and the pool holds little more than its live peak.

The setting is process-wide (`expandable_segments` in PyTorch's allocator settings) and read when
a segment is created, not when memory is freed. `expandable_capture()` turns it on for the
duration of one capture and restores the previous value after, so only segments created inside
captures (all of them in the graph's pool) are expandable; the user's ordinary pool keeps the
setting the user chose (a segment another thread creates while a capture runs is expandable too;
that changes how it grows, not what it holds). When the user already turned it on, nothing
changes. Off with `COIL_GRAPH_POOL_EXPANDABLE=0`; skipped (with no error) where the allocator is
not the native one or this torch cannot change the setting at run time.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager

from coil.knobs import knobs

log = logging.getLogger("coil.runtime")

__all__ = ["expandable_capture", "expandable_now"]

_SETTING = re.compile(r"expandable_segments\s*:\s*(\w+)", re.IGNORECASE)


def expandable_now() -> bool:
    """Whether the caching allocator creates expandable segments now: from the allocator's own
    settings where this torch reports them, else from the environment (PYTORCH_ALLOC_CONF, or
    PYTORCH_CUDA_ALLOC_CONF when that is unset, as PyTorch reads them)."""
    import torch

    get = getattr(torch._C, "_accelerator_getAllocatorSettings", None)
    text: str | None = None
    if get is not None:
        try:
            text = str(get())
        except RuntimeError:
            text = None
    if text is None:
        text = knobs.alloc_conf or knobs.cuda_alloc_conf
    m = _SETTING.search(text)
    if m is None:
        return False
    return m.group(1).strip().lower() in ("true", "1")


def _set(on: bool) -> bool:
    """Set `expandable_segments`; False where this torch cannot."""
    import torch

    setter = getattr(torch._C, "_accelerator_setAllocatorSettings", None)
    if setter is None:  # older torch
        setter = getattr(torch.cuda.memory, "_set_allocator_settings", None)
    if setter is None:
        return False
    try:
        setter(f"expandable_segments:{'True' if on else 'False'}")
    except RuntimeError as e:  # an allocator backend without the setting (cudaMallocAsync)
        log.info("coil.runtime: expandable segments for the graph pool unavailable: %s", e)
        return False
    return True


def _native() -> bool:
    """Whether the CUDA caching allocator is PyTorch's own (not cudaMallocAsync)."""
    import torch

    try:
        return torch.cuda.memory.get_allocator_backend() == "native"
    except (AttributeError, RuntimeError):  # a torch built without CUDA
        return False


@contextmanager
def expandable_capture() -> Iterator[bool]:
    """Inside: the caching allocator creates expandable segments (yields whether this block turned
    them on). The previous setting is restored on exit, exceptions included."""
    if not knobs.graph_pool_expandable or not _native() or expandable_now():
        yield False
        return
    if not _set(True):
        yield False
        return
    try:
        yield True
    finally:
        _set(False)
