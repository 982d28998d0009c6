"""KernelCompileError: names the kernel and the cached file, chains the original error;
`without_frames` drops the tracebacks of an error kept as a value."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from coil.runtime import KernelCompileError, KernelSpec, TensorArg, compile_kernels
from coil.runtime.compile import clear_memo
from coil.runtime.errors import without_frames

CPU = torch.device("cpu")
F32 = TensorArg(torch.float32)
HEADER = "import triton\nimport triton.language as tl\n\n"


@pytest.mark.parametrize(
    ("body", "cause"),
    [
        ("@triton.jit\ndef k(x_ptr):\n    tl.store(x_ptr, 1.0\n", SyntaxError),
        ("import no_such_module_anywhere\n", ModuleNotFoundError),
        ("raise RuntimeError('boom at import')\n", RuntimeError),
        ("@triton.jit\ndef other(x_ptr):\n    pass\n", LookupError),
        ("def k(x_ptr):\n    pass\n", TypeError),
    ],
    ids=["syntax", "import", "raises", "missing", "not-jit"],
)
def test_bad_source(cache_dir: Path, body: str, cause: type[Exception]) -> None:
    spec = KernelSpec("k", HEADER + body, (F32,), {})
    with pytest.raises(KernelCompileError) as info:
        compile_kernels([spec], CPU)
    err = info.value
    assert isinstance(err.__cause__, cause)
    assert err.kernel_name == "k" and err.stage == "load"
    assert err.path.is_file() and err.path.is_relative_to(cache_dir)
    assert "'k'" in str(err) and str(err.path) in str(err)
    # a failure is not memoised: fixing nothing fails again, the same way
    clear_memo()
    with pytest.raises(KernelCompileError):
        compile_kernels([spec], CPU)


def test_syntax_error_points_into_the_cached_file(cache_dir: Path) -> None:
    spec = KernelSpec("k", HEADER + "def k(:\n", (F32,), {})
    with pytest.raises(KernelCompileError) as info:
        compile_kernels([spec], CPU)
    cause = info.value.__cause__
    assert isinstance(cause, SyntaxError)
    assert cause.filename == str(info.value.path)


def _raise_chained() -> Exception:
    """An error raised from a cause, while handling a third one, and caught: three tracebacks."""
    try:
        try:
            raise KeyError("context")
        except KeyError:
            try:
                raise ValueError("cause")
            except ValueError as cause:
                raise RuntimeError("outer") from cause
    except RuntimeError as exc:
        return exc
    raise AssertionError("unreachable")


def test_without_frames_drops_every_traceback_of_the_chain() -> None:
    exc = _raise_chained()
    cause, context = exc.__cause__, exc.__cause__.__context__ if exc.__cause__ else None
    assert exc.__traceback__ is not None and cause is not None and cause.__traceback__ is not None
    assert isinstance(context, KeyError) and context.__traceback__ is not None
    context.__context__ = exc  # a cycle in the chain ends the walk too
    assert without_frames(exc) is exc
    assert [e.__traceback__ for e in (exc, cause, context)] == [None, None, None]
    assert str(exc) == "outer" and exc.__cause__ is cause and str(cause) == "cause"  # what it says stays
