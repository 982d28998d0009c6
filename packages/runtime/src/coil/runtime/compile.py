"""`compile_kernels`: KernelSpecs in, launchable Kernels out (cached on disk and in memory)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from coil.knobs import knobs
from coil.runtime import aot, disk_cache, loader
from coil.runtime._triton import load_triton, torch_version
from coil.runtime.errors import KernelCompileError, without_frames
from coil.runtime.interpreter import interpreter_enabled
from coil.runtime.kernel import Kernel
from coil.runtime.spec import KernelSpec

if TYPE_CHECKING:
    import torch

_lock = threading.Lock()
_kernels: dict[tuple[tuple[object, ...], torch.device, bool], Kernel] = {}  # by KernelSpec.code_key
_modules: dict[Path, ModuleType] = {}


def compile_kernels(specs: Sequence[KernelSpec], device: torch.device) -> dict[str, Kernel]:
    """Load every spec's kernel for `device` and return them by `KernelSpec.name`.

    Specs whose code is the same (`KernelSpec.code_key`: equal but for the kernel's name and the
    source's comment lines) share one `Kernel`, compiled once: the returned mapping has every
    name, and a `Kernel`'s own `name` is that of the first such spec it was compiled for.
    Per distinct code, unless this process already compiled it for the same device (then the
    same `Kernel` object is returned, nothing is re-read or re-imported):

    1. its module source is put in the disk cache (`disk_cache`: keyed by source, triton and torch
       versions; atomic writes; a corrupted entry is rebuilt) and executed from there (`loader`);
    2. on a CUDA device, unless the interpreter is on (`interpreter_enabled`) or
       the knob aot_compile is off, all new kernels are compiled ahead of time, in parallel (`aot`), so the
       first launch does not compile; on the CPU nothing is compiled, kernels run interpreted.

    Args:
        specs: the kernels; names must be unique (equal duplicates are allowed).
        device: where the kernels will run (`cuda` without an index means the current device).

    Raises:
        ValueError: two different specs share a name.
        KernelCompileError: a module fails to execute, lacks its kernel, or fails to compile;
            the message names the kernel and its cache file, the original error is chained.
    """
    device = _normalize(device)
    interpreted = interpreter_enabled(device)
    by_name: dict[str, KernelSpec] = {}
    for spec in specs:
        if by_name.setdefault(spec.name, spec) != spec:
            raise ValueError(f"two different KernelSpecs are named {spec.name!r}")

    result: dict[str, Kernel] = {}
    fresh: list[Kernel] = []
    first: dict[tuple[object, ...], str] = {}
    same: dict[str, str] = {}
    for name, spec in by_name.items():
        earlier = first.setdefault(spec.code_key, name)
        if earlier != name:
            same[name] = earlier
            continue
        with _lock:
            kernel = _kernels.get((spec.code_key, device, interpreted))
        if kernel is None:
            kernel = _load(spec, device, interpreted)
            fresh.append(kernel)
        result[name] = kernel

    if fresh and device.type == "cuda" and not interpreted and knobs.aot_compile:
        aot.precompile(fresh, device, knobs.compile_threads)
    with _lock:
        for kernel in fresh:
            # a racing thread may have stored an equal kernel first: keep one, return it
            kept = _kernels.setdefault((kernel.spec.code_key, device, interpreted), kernel)
            result[kernel.name] = kept
    for name, earlier in same.items():
        result[name] = result[earlier]
    return result


def prefetch_kernels(specs: Sequence[KernelSpec], device: torch.device) -> None:
    """Start compiling `specs` for `device` in the compile workers and return at once.

    A later `compile_kernels` (or `compile_variants`) of an equal spec then waits for that compile
    instead of starting its own, so a caller can queue a graph's kernels early and do other work
    (autotuning the rest) while they compile. Does nothing on the CPU, under the interpreter,
    with the knob aot_compile off or COIL_COMPILE_WORKERS=0; never raises (a spec that fails to load is
    reported by the later compile).
    """
    device = _normalize(device)
    if device.type != "cuda" or interpreter_enabled(device) or not knobs.aot_compile:
        return
    kernels: list[Kernel] = []
    seen: set[tuple[object, ...]] = set()
    for spec in specs:
        with _lock:
            known = (spec.code_key, device, False) in _kernels or spec.code_key in seen
        seen.add(spec.code_key)
        if not known:
            try:
                kernels.append(_load(spec, device, False))
            except KernelCompileError:
                continue
    aot.prefetch(kernels, device)


def compile_variants(specs: Sequence[KernelSpec], device: torch.device) -> list[Kernel | KernelCompileError]:
    """Load and (on a GPU) compile every spec like `compile_kernels`, but names may repeat (the
    variants of one kernel under other constexprs or warps) and a failure is returned, not raised.

    Returns, in order, each spec's `Kernel` or its `KernelCompileError`. New GPU kernels compile in
    parallel on COIL_COMPILE_THREADS threads (`aot.precompile_each`). Kernels that loaded and
    compiled join the in-process memo, so a later `compile_kernels` of an equal spec reuses them.
    """
    device = _normalize(device)
    interpreted = interpreter_enabled(device)
    out: list[Kernel | KernelCompileError] = []
    fresh: list[tuple[int, Kernel]] = []
    for spec in specs:
        with _lock:
            kernel = _kernels.get((spec.code_key, device, interpreted))
        if kernel is None:
            try:
                kernel = _load(spec, device, interpreted)
            except KernelCompileError as exc:
                out.append(without_frames(exc))
                continue
            fresh.append((len(out), kernel))
        out.append(kernel)
    if fresh and device.type == "cuda" and not interpreted and knobs.aot_compile:
        errors = aot.precompile_each([k for _, k in fresh], device, knobs.compile_threads)
        for (i, _), error in zip(fresh, errors, strict=True):
            if error is not None:
                out[i] = error
    with _lock:
        for i, kernel in fresh:
            if out[i] is kernel:
                out[i] = _kernels.setdefault((kernel.spec.code_key, device, interpreted), kernel)
    return out


def clear_memo() -> None:
    """Forget this process's compiled kernels and loaded modules (tests; the disk cache stays)."""
    with _lock:
        _kernels.clear()
        _modules.clear()


def _normalize(device: torch.device) -> torch.device:
    import torch

    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    if device.type == "cpu":
        return torch.device("cpu")
    return device


def _load(spec: KernelSpec, device: torch.device, interpreted: bool) -> Kernel:
    """Cache, execute and look up one spec's module; errors become KernelCompileError."""
    info = load_triton()
    key = disk_cache.source_key(spec.source, info.version, torch_version())
    path = disk_cache.entry_path(knobs.cache_dir, key)
    text = disk_cache.render_entry(key, spec.source)
    try:
        with _lock:
            module = _modules.get(path)
        if module is None:
            disk_cache.ensure_entry(path, text)
            module = loader.load_module(path, text, key)
            with _lock:
                module = _modules.setdefault(path, module)
        fn = loader.find_kernel(module, spec.name)
        return Kernel(spec, fn, path, device, interpreted)
    except Exception as exc:
        raise KernelCompileError(spec.name, path, "load", exc) from exc
