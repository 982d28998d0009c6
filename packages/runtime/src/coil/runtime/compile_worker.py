"""A compile worker process: compiles coil's Triton kernels for a named GPU target into Triton's
on-disk cache (`python -m coil.runtime.compile_worker`; started by `compile_pool`).

Protocol (JSON lines): after importing Triton the worker writes `{"ready": true}`; then, for each
request line on stdin (a `CompileJob.to_json()`), one reply line `{"ok": true}` or
`{"ok": false, "error": "<type>: <message>"}`. End of input ends the worker. Replies go to the
stdout the worker was started with; anything else that prints to stdout (Triton, a kernel
module) is sent to stderr instead, so it cannot corrupt a reply.

Each job is compiled as `JITFunction.warmup` would in the parent (see `compile_jobs`): the kernel
module is executed from its file like `loader` does, Triton's `ASTSource` is rebuilt from the
serialised signature, constexprs and attributes, options parsed by the target's backend, and
`triton.compile` runs with the parent's environment in effect. It never touches a GPU.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import IO, Any

from coil.knobs import knobs


def _tuples(value: Any) -> Any:
    """JSON lists back to the tuples Triton serialised (Triton's signatures hold no lists)."""
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def _constant(value: Any) -> Any:
    import triton.language as tl

    if isinstance(value, str) and tl.dtype.is_dtype(value):
        return tl.dtype(value)
    if isinstance(value, dict):
        if "constexpr" in value:
            return tl.constexpr(_tuples(value["constexpr"]))
        raise ValueError(f"unsupported serialised constant {value!r}")
    return value


def _module(path: str, modules: dict[str, ModuleType]) -> ModuleType:
    from coil.runtime import loader

    module = modules.get(path)
    if module is None:
        text = Path(path).read_text()
        module = loader.load_module(Path(path), text, Path(path).stem)
        modules[path] = module
    return module


def compile_job(job: dict[str, Any], modules: dict[str, ModuleType]) -> None:
    """Compile one request (a `CompileJob.to_json()`) into Triton's disk cache; raises on failure."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.compiler.compiler import make_backend

    knobs.replace_environ(job["env"])  # the parent's environment: Triton reads TRITON_* from it
    fn = getattr(_module(job["path"], modules), job["name"])
    data = json.loads(job["specialization"])
    constants = {tuple(k): _constant(v) for k, v in zip(data["constant_keys"], data["constant_vals"], strict=True)}
    attrs = {tuple(k): v for k, v in zip(data["attrs_keys"], data["attrs_vals"], strict=True)}
    signature = {k: _tuples(v) for k, v in data["signature"].items()}
    backend_name, arch, warp_size = job["target"]
    target = GPUTarget(backend_name, arch, warp_size)
    options = make_backend(target).parse_options({k: _tuples(v) for k, v in data["options"].items()})
    src = ASTSource(fn, signature, constants, attrs)
    triton.compile(src, target=target, options=options.__dict__)


def serve(requests: IO[str], replies: IO[str]) -> None:
    """Answer requests until end of input (see the module docstring)."""
    modules: dict[str, ModuleType] = {}
    import triton.language  # noqa: F401  (the import cost is paid before "ready")

    replies.write(json.dumps({"ready": True}) + "\n")
    replies.flush()
    for line in requests:
        if not line.strip():
            continue
        try:
            compile_job(json.loads(line), modules)
            reply: dict[str, Any] = {"ok": True}
        except Exception as exc:  # every failure is a reply: the parent then compiles the kernel itself
            reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:2000]}
        replies.write(json.dumps(reply) + "\n")
        replies.flush()


def main() -> int:
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    serve(sys.stdin, replies)
    return 0


if __name__ == "__main__":
    sys.exit(main())
