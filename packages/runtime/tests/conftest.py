"""Shared fixtures: kernel sources, an isolated cache directory, a clean in-process memo, a watch
on Triton's code generator, a record of the CUDA-graph runners a test builds."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from coil.knobs import knobs
from coil.runtime import CudaGraphRunner, KernelSpec, TensorArg
from coil.runtime.compile import clear_memo
from coil.runtime.disk_cache import reset_cache_stats

ADD_SOURCE = '''\
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)
'''

# A row reduction with a user @jit helper (a nested jit call) and the standard library's tl.sum.
# The loop bound is a constexpr: portable to Triton 3.6's interpreter (see ROWSUM_DYNAMIC_SOURCE).
ROWSUM_SOURCE = '''\
import triton
import triton.language as tl


@triton.jit
def _square(v):
    return v * v


@triton.jit
def rowsum_kernel(in_ptr, out_ptr, N_COLS: tl.constexpr, RBLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([RBLOCK], dtype=tl.float32)
    for start in range(0, N_COLS, RBLOCK):
        cols = start + tl.arange(0, RBLOCK)
        mask = cols < N_COLS
        v = tl.load(in_ptr + row * N_COLS + cols, mask=mask, other=0.0)
        acc += _square(v.to(tl.float32))
    tl.store(out_ptr + row, tl.sum(acc, axis=0))
'''

# The same with a run-time loop bound, as Inductor-style codegen emits. Triton 3.6's interpreter
# fails on it with NumPy 2.x (`int()` of a one-element array in its patched __index__); 3.9 works.
ROWSUM_DYNAMIC_SOURCE = '''\
import triton
import triton.language as tl


@triton.jit
def rowsum_dynamic(in_ptr, out_ptr, n_cols, RBLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([RBLOCK], dtype=tl.float32)
    for start in range(0, n_cols, RBLOCK):
        cols = start + tl.arange(0, RBLOCK)
        mask = cols < n_cols
        v = tl.load(in_ptr + row * n_cols + cols, mask=mask, other=0.0)
        acc += v.to(tl.float32) * v.to(tl.float32)
    tl.store(out_ptr + row, tl.sum(acc, axis=0))
'''


def triton_version() -> tuple[int, int]:
    """(major, minor) of the installed triton."""
    import triton

    major, minor = triton.__version__.split(".")[:2]
    return int(major), int(minor)


class Specs:
    """Kernel specs for tests (a fixture: conftest is not importable under importlib mode)."""

    add_source = ADD_SOURCE
    rowsum_source = ROWSUM_SOURCE
    triton_version = staticmethod(triton_version)

    @staticmethod
    def add(block: int = 64) -> KernelSpec:
        f32 = TensorArg(torch.float32)
        return KernelSpec("add_kernel", ADD_SOURCE, (f32, f32, f32, 1024), {"BLOCK": block})

    @staticmethod
    def rowsum(n_cols: int, rblock: int = 128) -> KernelSpec:
        f32 = TensorArg(torch.float32)
        constexprs = {"N_COLS": n_cols, "RBLOCK": rblock}
        return KernelSpec("rowsum_kernel", ROWSUM_SOURCE, (f32, f32), constexprs)

    @staticmethod
    def rowsum_dynamic(rblock: int = 128) -> KernelSpec:
        f32 = TensorArg(torch.float32)
        source = ROWSUM_DYNAMIC_SOURCE
        return KernelSpec("rowsum_dynamic", source, (f32, f32, 1024), {"RBLOCK": rblock})


@pytest.fixture(autouse=True)
def _compiled_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test starts with TRITON_INTERPRET unset, as `nox` runs this package (tests that want
    the interpreter set it themselves): another package's tests in the same pytest process
    (triton-codegen's conftest sets it at import) must not turn CUDA kernels into interpreted ones."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)


@pytest.fixture(scope="session")
def specs() -> type[Specs]:
    """The test kernels' specs and sources."""
    return Specs


@pytest.fixture
def cache_dir(tmp_path: Path) -> Iterator[Path]:
    """A fresh COIL_CACHE_DIR for this test, an empty memo and zeroed cache counters."""
    root = tmp_path / "coil-cache"
    clear_memo()
    reset_cache_stats()
    with knobs.override(cache_dir=root):
        yield root
    clear_memo()


@pytest.fixture
def clean_env() -> dict[str, str]:
    """This process's environment without TRITON_INTERPRET and coil's variables (for subprocesses)."""
    return knobs.environ(defaults=True, triton_interpret=None)


@pytest.fixture
def generated(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The functions Triton's code generator (`ASTSource.make_ir`) runs for in this process from
    now on, by name, in order: a binary found in Triton's disk cache never reaches it."""
    from triton.compiler import ASTSource

    calls: list[str] = []
    real = ASTSource.make_ir

    def make_ir(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(self.fn.__name__)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(ASTSource, "make_ir", make_ir)
    return calls


@contextlib.contextmanager
def _recording() -> Iterator[list[CudaGraphRunner]]:
    made: list[CudaGraphRunner] = []
    real = CudaGraphRunner.__init__

    def record(self: CudaGraphRunner, *args: Any, **kwargs: Any) -> None:
        real(self, *args, **kwargs)
        made.append(self)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(CudaGraphRunner, "__init__", record)
        yield made


@pytest.fixture
def recording() -> Callable[[], contextlib.AbstractContextManager[list[CudaGraphRunner]]]:
    """`with recording() as made:` -- every CudaGraphRunner built inside the block, in order."""
    return _recording


def _relocate(w: torch.Tensor, held: list[torch.Tensor]) -> None:
    """Re-allocate `w`'s storage elsewhere, values kept, as FSDP2's gathers do: the storage is
    freed (`resize_(0)`) and the memory it had taken by allocations appended to `held` (the
    allocator may hand out another free block of the size first), then allocated again."""
    nbytes, before, value = w.untyped_storage().nbytes(), w.data_ptr(), w.detach().clone()
    w.untyped_storage().resize_(0)
    for _ in range(64):
        held.append(torch.empty(nbytes, dtype=torch.uint8, device=w.device))
        if held[-1].data_ptr() == before:
            break
    w.untyped_storage().resize_(nbytes)
    with torch.no_grad():
        w.copy_(value)
    assert w.data_ptr() != before, "the storage did not move"


@pytest.fixture
def relocate() -> Callable[[torch.Tensor, list[torch.Tensor]], None]:
    """`relocate(w, held)`: `w`'s storage re-allocated at another address, its values kept."""
    return _relocate
