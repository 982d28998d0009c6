"""`CompileJob`: what another process needs to compile one kernel exactly as this one would.

A GPU kernel's first `JITFunction.warmup` in this process would compile it here, under the GIL.
Instead, `capture` runs that warmup with Triton's `knobs.runtime.jit_cache_hook` set: Triton
calls the hook with its own serialised description of the call (the JSON of its
`serialize_specialization_data`: signature, constexprs, attributes such as 16-byte divisibility,
options) just before it would compile, and the hook answers "skip". The job keeps that JSON, the
GPU target (`GPUTarget` fields), the kernel module's file, and this process's environment
(Triton's cache key reads some variables; `TRITON_CACHE_DIR` is set to the folder Triton uses
here). A worker (`compile_worker`) rebuilds Triton's `ASTSource` from it and calls
`triton.compile`, which writes the binary into Triton's on-disk cache under the key this
process's own warmup computes next, so that warmup only loads it.

Nothing here decides correctness: a job that is wrong or lost only means the later warmup in this
process compiles the kernel itself.

`remember_compiled(kernel, target)` records, in Triton's cache folder, that the kernel was
compiled and loaded here, so that its binary is in that folder; `known_compiled` asks. A warm
start whose kernels are all known loads them in its own process and starts no worker (workers
starting up would compete with the warm start for the CPU; docs/perf.md). A wrong marker (Triton's folder emptied by hand) only means the warmup here
compiles that kernel itself.

The marker also holds the kernel function's Triton cache key (`JITFunction.cache_key`: a sha256
of its source and of what it calls, which Triton computes by parsing the source's AST, once per
function and process: milliseconds a function), and `reuse_cache_key` gives it to
the same function in a later process before its warmup: a warm start then loads each binary
without parsing. The key is only ever read back for the kernel it was computed for (the marker's
name covers the module file, the source and Triton's version), and Triton's own compile key
also hashes Triton's sources and the options, so a stale key can cost a compile, never a wrong
binary. Triton keeps no `used_global_vals` for a function whose key it did not compute, and so
does not re-check its globals at launches; coil's kernel modules never rebind theirs.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coil.knobs import knobs
from coil.runtime.kernel import Kernel, launch_options
from coil.runtime.spec import TensorArg

if TYPE_CHECKING:
    import torch

_local = threading.local()
_hook_lock = threading.Lock()


@dataclass(frozen=True)
class CompileJob:
    """One kernel to compile in a worker process (JSON-serialisable fields only).

    Attributes:
        path: the kernel module's file (coil's disk-cache entry; executed as a module there).
        name: the `@triton.jit` function in that module.
        specialization: Triton's JSON description of the call (see the module docstring).
        target: `GPUTarget(backend, arch, warp_size)` fields of the device it is compiled for.
        env: this process's environment, with `TRITON_CACHE_DIR` resolved.
    """

    path: str
    name: str
    specialization: str
    target: tuple[str, int | str, int]
    env: dict[str, str]

    def to_json(self) -> dict[str, Any]:
        """The job as a JSON object (the worker protocol's request)."""
        return {"path": self.path, "name": self.name, "specialization": self.specialization,
                "target": list(self.target), "env": self.env}


Target = tuple[str, int | str, int]


def target_of(device: torch.device) -> Target:
    """Triton's `GPUTarget` fields (backend, arch, warp size) for `device`."""
    import torch
    from triton.runtime.driver import driver

    with torch.cuda.device(device):
        t = driver.active.get_current_target()
    return (str(t.backend), t.arch, int(t.warp_size))


def _marker(kernel: Kernel, target: Target) -> Path:
    """The file saying `kernel` was compiled for `target` into Triton's current cache folder: keyed
    by the kernel's module file and name, its `code_key` (source, arguments, constexprs, warps,
    stages), the target, Triton's version and the TRITON_* variables."""
    import triton

    env = sorted((k, v) for k, v in knobs.environ().items() if k.startswith("TRITON_"))
    key = repr((str(kernel.path), kernel.name, kernel.spec.code_key, target, triton.__version__, env))
    return Path(triton.knobs.cache.dir) / "coil-compiled" / hashlib.sha256(key.encode()).hexdigest()


def known_compiled(kernel: Kernel, target: Target) -> bool:
    """True when `remember_compiled` ran for this kernel, target and Triton cache (in any process)."""
    return _marker(kernel, target).exists()


_KEY = re.compile(r"[0-9a-f]{64}")


def _cache_key(kernel: Kernel) -> str | None:
    """The Triton cache key of `kernel.fn` if Triton has computed it in this process, else None."""
    key = getattr(kernel.fn, "hash", None)
    return key if isinstance(key, str) and _KEY.fullmatch(key) else None


def remember_compiled(kernel: Kernel, target: Target) -> None:
    """Record that `kernel` is compiled for `target` into Triton's cache folder, with its function's
    Triton cache key when known (written whole or not at all: a temporary file renamed). Best
    effort: a folder that cannot be written only means the next process sends it to a worker
    again, or parses its source again."""
    try:
        path = _marker(kernel, target)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(_cache_key(kernel) or "")
        os.replace(tmp, path)
    except OSError:
        pass


def remembered_key(kernel: Kernel, target: Target) -> str | None:
    """The Triton cache key `remember_compiled` stored for this kernel, or None (no marker, an
    empty one from before keys were kept, or anything that is not a sha256)."""
    try:
        text = _marker(kernel, target).read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text if _KEY.fullmatch(text) else None


def reuse_cache_key(kernel: Kernel, target: Target) -> bool:
    """Give `kernel.fn` the cache key an earlier process stored for it (`remembered_key`) if
    Triton has not computed one here yet, so that the warmup skips parsing the source. True when
    the function has a key now (computed or given), False when Triton will compute it."""
    fn = kernel.fn
    if _cache_key(kernel) is not None:
        return True
    key = remembered_key(kernel, target)
    if key is None or getattr(fn, "hash", "") is not None:
        return False
    lock = getattr(fn, "_hash_lock", None)
    if lock is None:
        return False
    with lock:
        if fn.hash is None:
            fn.hash = key
    return True


def warmup_args(kernel: Kernel) -> list[object]:
    """The placeholder positional arguments that `warmup` compiles `kernel` for."""
    return [a.dtype if isinstance(a, TensorArg) else a for a in kernel.spec.args]


def warmup(kernel: Kernel) -> Any:
    """`JITFunction.warmup` of `kernel` with its spec's arguments, constexprs and options (on the
    current device): compiles it, or finds it in Triton's caches. Returns what Triton returns:
    the compiled kernel (None when a `jit_cache_hook` skipped the compile)."""
    spec = kernel.spec
    return kernel.fn.warmup(*warmup_args(kernel), grid=(1,), **spec.constexprs, **launch_options(spec))


def _hook(**kwargs: Any) -> bool | None:
    """Triton's jit_cache_hook while `capture` runs: on a capturing thread record the call's
    specialisation and skip the compile; elsewhere defer to the hook that was set before."""
    box = getattr(_local, "box", None)
    if box is None:
        previous = _previous_hook[0]
        return previous(**kwargs) if previous is not None else None
    box.append(str(kwargs["compile"]["specialization_data"]))
    return True


_previous_hook: list[Any] = [None]


def capture(kernels: Sequence[Kernel], device: torch.device) -> list[CompileJob | None]:
    """A job per kernel (same order), or None where Triton would not compile it here (its binary
    is already in this process's kernel cache) or where the capture itself failed (the caller's
    warmup will then compile it, and report any error)."""
    import torch
    import triton

    target = target_of(device)
    env = knobs.environ()
    env["TRITON_CACHE_DIR"] = str(triton.knobs.cache.dir)
    jobs: list[CompileJob | None] = []
    with _hook_lock:
        _previous_hook[0] = triton.knobs.runtime.jit_cache_hook
        triton.knobs.runtime.jit_cache_hook = _hook
        try:
            with torch.cuda.device(device):
                for kernel in kernels:
                    box: list[str] = []
                    _local.box = box
                    try:
                        warmup(kernel)
                    except Exception:
                        box.clear()  # the caller's own warmup raises it, with its kernel named
                    finally:
                        _local.box = None
                    jobs.append(CompileJob(str(kernel.path), kernel.name, box[0], target, env) if box else None)
        finally:
            triton.knobs.runtime.jit_cache_hook = _previous_hook[0]
            _previous_hook[0] = None
    return jobs
