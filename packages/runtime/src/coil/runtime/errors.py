"""The runtime's error type."""

from __future__ import annotations

from pathlib import Path


class KernelCompileError(RuntimeError):
    """A kernel's module could not be loaded, or its Triton function could not be compiled.

    Attributes:
        kernel_name: `KernelSpec.name` of the failing kernel.
        path: the cached source file that was loaded (open it to read the failing code).
        stage: what failed: "load" (executing the module, finding the function) or "compile"
            (Triton compiling it ahead of time).

    The original exception is chained (`__cause__`).
    """

    def __init__(self, kernel_name: str, path: Path, stage: str, cause: BaseException) -> None:
        self.kernel_name = kernel_name
        self.path = path
        self.stage = stage
        detail = f"{type(cause).__name__}: {cause}"
        super().__init__(f"coil kernel {kernel_name!r} failed to {stage} ({path}): {detail}")
