"""Ahead-of-time compilation of GPU kernels, in parallel, before their first launch.

Each kernel is compiled with Triton's public `JITFunction.warmup(*args, grid=..., **kwargs)`
(same signature in Triton 3.6 and 3.9): pointer arguments are passed as their torch dtypes (Triton
stands a mock tensor in for them), ints as the spec's example values, plus the bound constexprs,
num_warps and num_stages (and debug options for a `KernelSpec(debug=True)`: `launch_options`). Triton keeps the binary in its in-memory kernel cache (the first real
launch with the same specialisation finds it there) and in its own on-disk cache (TRITON_CACHE_DIR).

The first kernel compiles in the calling thread (so Triton's driver and torch's CUDA context are
set up by one thread), the rest on a pool of `COIL_COMPILE_THREADS` threads, each with the target
device made current.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from coil.runtime.errors import KernelCompileError
from coil.runtime.kernel import Kernel, launch_options
from coil.runtime.spec import TensorArg

if TYPE_CHECKING:
    import torch


def warmup_args(kernel: Kernel) -> list[object]:
    """The placeholder positional arguments that `warmup` compiles `kernel` for."""
    return [a.dtype if isinstance(a, TensorArg) else a for a in kernel.spec.args]


def _compile_one(kernel: Kernel, device: torch.device) -> None:
    import torch

    spec = kernel.spec
    try:
        with torch.cuda.device(device):
            kernel.fn.warmup(
                *warmup_args(kernel),
                grid=(1,),
                **spec.constexprs,
                **launch_options(spec),
            )
    except Exception as exc:
        raise KernelCompileError(spec.name, kernel.path, "compile", exc) from exc


def precompile(kernels: Sequence[Kernel], device: torch.device, threads: int) -> None:
    """Compile every kernel for `device` (a CUDA device); raise the first failure in order.

    Raises `KernelCompileError` (the Triton error chained) naming the kernel and its source file.
    """
    if not kernels:
        return
    _compile_one(kernels[0], device)
    rest = kernels[1:]
    if not rest:
        return
    if threads <= 1:
        for kernel in rest:
            _compile_one(kernel, device)
        return
    with ThreadPoolExecutor(max_workers=min(threads, len(rest)), thread_name_prefix="coil-aot") as pool:
        futures = [pool.submit(_compile_one, kernel, device) for kernel in rest]
        errors = [f.exception() for f in futures]
    for error in errors:
        if error is not None:
            raise error


def precompile_each(kernels: Sequence[Kernel], device: torch.device, threads: int) -> list[KernelCompileError | None]:
    """Compile every kernel for `device` (a CUDA device), in parallel like `precompile`; return
    each kernel's failure (a `KernelCompileError`) or None, in order, without raising (autotuning
    drops a candidate that fails to compile, e.g. out of registers or shared memory).

    Several kernels may share one Triton function (the variants of a kernel under other
    constexprs). A function's first compile sets up its per-device state (its cache key, its
    argument binder and kernel cache), which Triton does not guard against concurrent first
    use, so compiles run in two rounds: the first kernel of every distinct function (the very
    first in the calling thread, the others on the pool), then all the rest on the pool.
    """
    if not kernels:
        return []
    errors: list[KernelCompileError | None] = [None] * len(kernels)
    seen: set[int] = set()
    firsts: list[int] = []
    for i, kernel in enumerate(kernels):
        if id(kernel.fn) not in seen:
            seen.add(id(kernel.fn))
            firsts.append(i)
    rest = sorted(set(range(len(kernels))) - set(firsts))
    errors[0] = _try_one(kernels[0], device)
    for batch in (firsts[1:], rest):
        if threads <= 1 or len(batch) <= 1:
            for i in batch:
                errors[i] = _try_one(kernels[i], device)
            continue
        with ThreadPoolExecutor(max_workers=min(threads, len(batch)), thread_name_prefix="coil-aot") as pool:
            for i, error in zip(batch, pool.map(lambda j: _try_one(kernels[j], device), batch), strict=True):
                errors[i] = error
    return errors


def _try_one(kernel: Kernel, device: torch.device) -> KernelCompileError | None:
    try:
        _compile_one(kernel, device)
    except KernelCompileError as exc:
        return exc
    return None
