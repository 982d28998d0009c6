"""A compiled CUDA graph runs with its device current, whichever device the caller has current.

Triton launches a kernel on the current device, and a CUDA graph replays on the current device's
stream; the wrapper's fast allocation allocates there too. A model moved to `cuda:1` without
`torch.cuda.set_device(1)` (one process driving several GPUs) would otherwise launch its kernels
on `cuda:0` with pointers into `cuda:1`'s memory. Eager PyTorch needs no such care: each ATen op
runs on its tensors' device. So in a process that sees more than one GPU, a CUDA graph's callable
makes its device current for the call (`torch.cuda.device`, a no-op exchange when it already is);
with one GPU visible, the only device is always current and the callable is returned as it is.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["on_device"]

Boxed = Callable[[list[Any]], Any]


def on_device(run: Boxed, device: torch.device) -> Boxed:
    """`run`, or where `device` is one CUDA device among several visible, `run` called with
    `device` current (the caller's current device restored after)."""
    if device.type != "cuda" or device.index is None or torch.cuda.device_count() <= 1:
        return run
    index = device.index

    def guarded(args: list[Any]) -> Any:
        with torch.cuda.device(index):
            return run(args)

    return guarded
