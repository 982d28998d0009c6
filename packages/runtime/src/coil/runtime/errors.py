"""The runtime's error type, and how an error kept as a value drops its frames."""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

E = TypeVar("E", bound=BaseException)


def without_frames(exc: E) -> E:
    """`exc`, with the traceback of it and of every exception it chains (`__cause__`,
    `__context__`) dropped; its message and its chained exceptions stay. For an error kept after
    its `except` block (returned, stored on a long-lived object): a traceback holds its frames
    and each frame its caller's, up to the user's code, so a kept one keeps every local those
    frames held when they returned (a model's first outputs, a batch) for as long as the error
    lives, and, where a frame on it holds the error, until Python's next full collection."""
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        e = todo.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        e.__traceback__ = None
        todo.extend(c for c in (e.__cause__, e.__context__) if c is not None)
    return exc


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
