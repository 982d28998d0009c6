"""Ahead-of-time compilation of GPU kernels, in parallel, before their first launch.

Each kernel is compiled with Triton's public `JITFunction.warmup(*args, grid=..., **kwargs)`
(same signature in Triton 3.6 and 3.9): pointer arguments are passed as their torch dtypes (Triton
stands a mock tensor in for them), ints as the spec's example values, plus the bound constexprs,
num_warps and num_stages (and debug options for a `KernelSpec(debug=True)`: `launch_options`). Triton keeps the binary in its in-memory kernel cache (the first real
launch with the same specialisation finds it there) and in its own on-disk cache (TRITON_CACHE_DIR).

With worker processes (COIL_COMPILE_WORKERS > 0, the default; `compile_pool`), each kernel's
warmup is first captured as a `CompileJob` (`compile_jobs.capture`) and compiled by a worker into
Triton's disk cache; as each job finishes, this thread runs the kernel's warmup, which now only
loads the binary. Kernels with no job (already compiled here, or not capturable) and kernels
compiled into the same Triton cache before (`compile_jobs.known_compiled`, by this process or an
earlier one: a warm start) are warmed up first, here, while the workers run; when that is every
kernel, no worker starts. A job that fails in a worker costs nothing but time: the warmup
here compiles the kernel and raises its real error.

Without workers (COIL_COMPILE_WORKERS=0, or fewer than two kernels), the first kernel compiles in
the calling thread (so Triton's driver and torch's CUDA context are set up by one thread), the
rest on a pool of `COIL_COMPILE_THREADS` threads, each with the target device made current.

Either way, the kernels' host launchers are then built on `COIL_COMPILE_THREADS` threads, one per
signature (`launchers.prebuild`), before the first launch would build them one by one.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from coil.runtime import compile_jobs, compile_pool, launchers
from coil.runtime.errors import KernelCompileError, without_frames
from coil.runtime.kernel import Kernel

if TYPE_CHECKING:
    import torch

log = logging.getLogger("coil.runtime")


def _compile_one(kernel: Kernel, device: torch.device) -> Any:
    import torch

    try:
        with torch.cuda.device(device):
            return compile_jobs.warmup(kernel)
    except Exception as exc:
        raise KernelCompileError(kernel.spec.name, kernel.path, "compile", exc) from exc


def precompile(kernels: Sequence[Kernel], device: torch.device, threads: int) -> None:
    """Compile every kernel for `device` (a CUDA device); raise the first failure in order.

    Raises `KernelCompileError` (the Triton error chained) naming the kernel and its source file.
    """
    for error in precompile_each(kernels, device, threads):
        if error is not None:
            try:
                raise error
            finally:  # this frame, on the traceback, must not hold its own error (errors.without_frames)
                error = None


def precompile_each(kernels: Sequence[Kernel], device: torch.device, threads: int) -> list[KernelCompileError | None]:
    """Compile every kernel for `device` (a CUDA device), in parallel like `precompile`; return
    each kernel's failure (a `KernelCompileError`) or None, in order, without raising (autotuning
    drops a candidate that fails to compile, e.g. out of registers or shared memory).

    Several kernels may share one Triton function (the variants of a kernel under other
    constexprs). A function's first compile sets up its per-device state (its cache key, its
    argument binder and kernel cache), which Triton does not guard against concurrent first
    use. Through worker processes every warmup here runs in the calling thread; on threads,
    compiles run in two rounds: the first kernel of every distinct function (the very first in
    the calling thread, the others on the pool), then all the rest on the pool.
    """
    if not kernels:
        return []
    target = _target(device)
    if target is not None:
        for kernel in kernels:  # a warm start: no parse of each source for Triton's cache key
            compile_jobs.reuse_cache_key(kernel, target)
    workers = compile_pool.shared_pool() if len(kernels) > 1 else None
    compiled: list[Any] = []
    if workers is not None and target is not None:
        got = _in_workers(kernels, device, workers, target, compiled)
        if got is not None:
            launchers.prebuild(compiled, threads)
            return got
        compiled.clear()
    errors: list[KernelCompileError | None] = [None] * len(kernels)
    seen: set[int] = set()
    firsts: list[int] = []
    for i, kernel in enumerate(kernels):
        if id(kernel.fn) not in seen:
            seen.add(id(kernel.fn))
            firsts.append(i)
    rest = sorted(set(range(len(kernels))) - set(firsts))
    errors[0] = _try_one(kernels[0], device, compiled)
    for batch in (firsts[1:], rest):
        if threads <= 1 or len(batch) <= 1:
            for i in batch:
                errors[i] = _try_one(kernels[i], device, compiled)
            continue
        with ThreadPoolExecutor(max_workers=min(threads, len(batch)), thread_name_prefix="coil-aot") as pool:
            for i, error in zip(batch, pool.map(lambda j: _try_one(kernels[j], device, compiled), batch), strict=True):
                errors[i] = error
    launchers.prebuild(compiled, threads)
    if target is not None:
        _remember([k for k, e in zip(kernels, errors, strict=True) if e is None], target)
    return errors


def _target(device: torch.device) -> compile_jobs.Target | None:
    """The device's GPU target, or None (logged at DEBUG) where no driver answers: kernels are
    then compiled on threads, neither remembered nor given a remembered cache key."""
    try:
        return compile_jobs.target_of(device)
    except Exception as exc:
        log.debug("coil: no GPU target for %s (%s: %s)", device, type(exc).__name__, exc)
        return None


def _remember(kernels: Sequence[Kernel], target: compile_jobs.Target) -> None:
    """Leave the marker (`compile_jobs.remember_compiled`) of every kernel compiled or loaded here
    whose marker is missing or holds no cache key yet, so that a later process loads it without
    sending it to a worker and without parsing its source: a kernel compiled alone (an
    autotuning problem's last new candidate, a graph's one new kernel) or with no workers at all
    was otherwise unknown to the next warm start, which started the pool for it."""
    for kernel in kernels:
        if compile_jobs.remembered_key(kernel, target) is None:
            compile_jobs.remember_compiled(kernel, target)


def _try_one(kernel: Kernel, device: torch.device, compiled: list[Any]) -> KernelCompileError | None:
    """Compile `kernel`; its failure, or None with Triton's compiled kernel appended to `compiled`."""
    try:
        got = _compile_one(kernel, device)
    except KernelCompileError as exc:
        return without_frames(exc)  # kept: autotuning holds the failures of its candidates
    if got is not None:
        compiled.append(got)
    return None


def _in_workers(kernels: Sequence[Kernel], device: torch.device, pool: compile_pool.CompilePool,
                target: compile_jobs.Target, compiled: list[Any]) -> list[KernelCompileError | None] | None:
    """`precompile_each` through worker processes (see the module docstring), Triton's compiled
    kernels appended to `compiled`; None when the jobs could not be captured at all (the caller
    compiles on threads instead)."""
    got = _new_jobs(kernels, device, "compiling on threads", target)
    if got is None:
        return None
    target, _, todo = got
    results = pool.run([job for _, job in todo]) if todo else iter(())
    sent = {i for i, _ in todo}
    errors: list[KernelCompileError | None] = [None] * len(kernels)
    for i in range(len(kernels)):
        if i not in sent:  # compiled earlier, here or into Triton's disk cache: load it here
            errors[i] = _try_one(kernels[i], device, compiled)
    for k, _ in results:
        i = todo[k][0]
        errors[i] = _try_one(kernels[i], device, compiled)
    _remember([k for k, e in zip(kernels, errors, strict=True) if e is None], target)
    return errors


def prefetch(kernels: Sequence[Kernel], device: torch.device) -> None:
    """Queue `kernels` for the compile workers and return at once (no-op without workers): a
    later `precompile_each` of the same kernels finds them compiled, or waits for them instead
    of compiling them twice. Never raises: a kernel that cannot be queued is compiled later."""
    workers = compile_pool.shared_pool()
    if workers is None or not kernels:
        return
    got = _new_jobs(kernels, device, "nothing prefetched")
    if got is not None and got[2]:
        workers.run([job for _, job in got[2]])


def _new_jobs(kernels: Sequence[Kernel], device: torch.device, instead: str, target: compile_jobs.Target | None = None
              ) -> tuple[compile_jobs.Target, list[int], list[tuple[int, compile_jobs.CompileJob]]] | None:
    """The device's target (`target`, or asked for), the indices of the kernels not compiled into
    Triton's cache before (`compile_jobs.known_compiled`), and a job for each of them that needs
    compiling (index, job); None when capturing fails as a whole (`_capture`)."""
    if target is None:
        target = compile_jobs.target_of(device)
    unknown = [i for i, k in enumerate(kernels) if not compile_jobs.known_compiled(k, target)]
    jobs = _capture([kernels[i] for i in unknown], device, instead) if unknown else []
    if jobs is None:
        return None
    return target, unknown, [(unknown[j], job) for j, job in enumerate(jobs) if job is not None]


def _capture(kernels: Sequence[Kernel], device: torch.device,
             instead: str) -> list[compile_jobs.CompileJob | None] | None:
    """`compile_jobs.capture`, or None (logged at DEBUG with what happens `instead`) when it fails
    as a whole, e.g. on a Triton without `jit_cache_hook`."""
    try:
        return compile_jobs.capture(kernels, device)
    except Exception as exc:
        log.debug("coil: kernel compile jobs not captured (%s: %s); %s", type(exc).__name__, exc, instead)
        return None
