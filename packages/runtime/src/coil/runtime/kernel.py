"""`Kernel`: one loaded Triton kernel with its launch arguments bound."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from coil.runtime.interpreter import RunFn, interpreted_run
from coil.runtime.spec import KernelSpec

if TYPE_CHECKING:
    import torch


class Kernel:
    """A compiled (or, on the CPU, interpreted) Triton kernel, ready to launch.

    `kernel(grid, *args)` launches `spec.name` over `grid` (1 to 3 ints; zeros launch nothing)
    with the positional `args` (tensors for `TensorArg`s, ints) and the spec's constexprs,
    num_warps and num_stages. Everything but the arguments is bound once, here, so a launch costs
    one call into Triton's launcher. The launch is asynchronous on a GPU (current stream of the
    current device); under the interpreter it runs to completion before returning.

    Attributes (read-only by convention): `name`, `spec`, `path` (the cached module source),
    `device`, `interpreted`, `fn` (the object from the module, a Triton `JITFunction` unless
    TRITON_INTERPRET was set when it was loaded).
    """

    __slots__ = ("_kwargs", "_run", "device", "fn", "interpreted", "name", "path", "spec")

    def __init__(
        self, spec: KernelSpec, fn: Any, path: Path, device: torch.device, interpreted: bool
    ) -> None:
        self.name = spec.name
        self.spec = spec
        self.path = path
        self.device = device
        self.interpreted = interpreted
        self.fn = fn
        self._kwargs: dict[str, object] = {
            **spec.constexprs,
            "num_warps": spec.num_warps,
            "num_stages": spec.num_stages,
        }
        self._run: RunFn = interpreted_run(fn) if interpreted else fn.run

    def __call__(self, grid: tuple[int, ...], *args: object) -> None:
        """Launch over `grid` with positional `args` (see the class docstring)."""
        self._run(*args, grid=grid, warmup=False, **self._kwargs)

    def __repr__(self) -> str:
        mode = "interpreted" if self.interpreted else "compiled"
        return f"<coil Kernel {self.name!r} {mode} on {self.device} from {self.path}>"
