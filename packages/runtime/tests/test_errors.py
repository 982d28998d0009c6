"""KernelCompileError: names the kernel and the cached file, chains the original error."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from coil.runtime import KernelCompileError, KernelSpec, TensorArg, compile_kernels
from coil.runtime.compile import clear_memo

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
