"""Ahead-of-time compilation logic, checked on the CPU with a stand-in for Triton's warmup.

The real thing (Triton compiling for a GPU) is in test_gpu.py.
"""

from __future__ import annotations

import contextlib
import gc
import threading
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from coil.knobs import knobs
from coil.runtime import Kernel, KernelCompileError, compile_kernels
from coil.runtime import aot as aot_module

CUDA0 = torch.device("cuda", 0)


class FakeJit:
    """Records warmup calls like a JITFunction would receive them."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.calls: list[tuple[tuple[object, ...], dict[str, object], str]] = []

    def warmup(self, *args: object, **kwargs: object) -> None:
        self.calls.append((args, kwargs, threading.current_thread().name))
        if self.fail:
            raise ValueError("triton says no")

    def run(self, *args: object, **kwargs: object) -> None:
        raise AssertionError("not launched here")


@pytest.fixture
def no_cuda_device(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No device context switch, and the thread path (worker processes: test_compile_pool.py)."""
    monkeypatch.setattr(torch.cuda, "device", lambda device: contextlib.nullcontext())
    with knobs.override(compile_workers=0):
        yield


def test_precompile_args_threads_and_errors(specs: Any, tmp_path: Path, no_cuda_device: None) -> None:
    fakes = [FakeJit(), FakeJit(), FakeJit(fail=True), FakeJit(fail=True)]
    kernels = [Kernel(specs.add(2**i), f, tmp_path / f"{i}.py", CUDA0, False) for i, f in
               enumerate(fakes)]
    with pytest.raises(KernelCompileError) as info:
        aot_module.precompile(kernels, CUDA0, threads=3)
    assert info.value.path == tmp_path / "2.py"  # the first failure, in spec order
    assert info.value.stage == "compile" and isinstance(info.value.__cause__, ValueError)
    assert all(len(f.calls) == 1 for f in fakes)  # every kernel was attempted
    args, kwargs, thread = fakes[0].calls[0]
    assert thread == threading.current_thread().name  # the first one compiles in the caller
    assert {f.calls[0][2] for f in fakes[1:]} <= {f"coil-aot_{i}" for i in range(3)}
    assert args == (torch.float32, torch.float32, torch.float32, 1024)
    assert kwargs == {"grid": (1,), "BLOCK": 1, "num_warps": 4, "num_stages": 1}


def test_precompile_each_returns_every_failure(specs: Any, tmp_path: Path, no_cuda_device: None) -> None:
    fakes = [FakeJit(fail=True), FakeJit(), FakeJit(fail=True), FakeJit()]
    kernels = [Kernel(specs.add(2**i), f, tmp_path / f"{i}.py", CUDA0, False) for i, f in
               enumerate(fakes)]
    errors = aot_module.precompile_each(kernels, CUDA0, threads=3)
    assert [e is None for e in errors] == [False, True, False, True]
    assert all(len(f.calls) == 1 for f in fakes)  # a failure stops nothing
    assert [e.path for e in errors if e is not None] == [tmp_path / "0.py", tmp_path / "2.py"]
    assert aot_module.precompile_each([], CUDA0, threads=3) == []


class Held:
    """A caller's local, watched through a weak reference."""


def test_precompile_each_failures_hold_no_frames(specs: Any, tmp_path: Path, no_cuda_device: None) -> None:
    """A failure returned as a value carries no traceback (nor does its cause): one would hold the
    caller's frame, and so what the caller held when it returned, as long as the failure lives
    (autotuning keeps its candidates' failures). With the collector off, the caller's local goes
    when the caller returns."""
    def caller() -> tuple[weakref.ref[Held], list[KernelCompileError | None]]:
        held = Held()
        kernels = [Kernel(specs.add(2), FakeJit(fail=True), tmp_path / "0.py", CUDA0, False)]
        return weakref.ref(held), aot_module.precompile_each(kernels, CUDA0, threads=1)

    gc.collect()
    gc.disable()
    try:
        ref, (error,) = caller()
        assert ref() is None, "the caller's local outlived it: the failure holds its frame"
    finally:
        gc.enable()
    assert error is not None and isinstance(error.__cause__, ValueError)
    assert "triton says no" in str(error) and error.path == tmp_path / "0.py"  # what it says stays
    assert error.__traceback__ is None and error.__cause__.__traceback__ is None


def test_precompile_raising_leaves_no_cycle(specs: Any, tmp_path: Path, no_cuda_device: None) -> None:
    """`precompile` raises a failure without holding it in its own frame: a cycle through that
    frame would keep the caller's frame, and its locals, until Python's next full collection."""
    def caller() -> tuple[weakref.ref[Held], str]:
        held = Held()
        kernels = [Kernel(specs.add(2), FakeJit(fail=True), tmp_path / "0.py", CUDA0, False)]
        try:
            aot_module.precompile(kernels, CUDA0, threads=1)
        except KernelCompileError as exc:
            return weakref.ref(held), str(exc)
        raise AssertionError("precompile did not raise")

    gc.collect()
    gc.disable()
    try:
        ref, message = caller()
        assert ref() is None, "the caller's local outlived it: a cycle holds its frame"
    finally:
        gc.enable()
    assert "triton says no" in message


def test_precompile_each_compiles_a_shared_function_first_alone(specs: Any, tmp_path: Path,
                                                                 no_cuda_device: None) -> None:
    """Variants sharing one Triton function: its first compile finishes before the others start."""
    events: list[str] = []
    lock = threading.Lock()

    class Recording(FakeJit):
        def __init__(self, name: str) -> None:
            super().__init__()
            self.name = name

        def warmup(self, *args: object, **kwargs: object) -> None:
            with lock:
                events.append(f"start {self.name} {kwargs['BLOCK']}")
            super().warmup(*args, **kwargs)
            with lock:
                events.append(f"end {self.name} {kwargs['BLOCK']}")

    a, b = Recording("a"), Recording("b")
    kernels = [Kernel(specs.add(2**i), fn, tmp_path / f"{i}.py", CUDA0, False)
               for i, fn in enumerate([a, a, b, a, b])]
    assert aot_module.precompile_each(kernels, CUDA0, threads=4) == [None] * 5
    assert len(a.calls) == 3 and len(b.calls) == 2
    for name, first in (("a", 1), ("b", 4)):
        done = events.index(f"end {name} {first}")
        assert all(events.index(e) > done for e in events if e.startswith(f"start {name}") and e != f"start {name} {first}")


def test_compile_kernels_precompiles_new_cuda_kernels_once(
    cache_dir: Path, specs: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[list[str]] = []
    monkeypatch.setattr(
        aot_module, "precompile", lambda ks, device, threads: seen.append([k.name for k in ks])
    )
    first = compile_kernels([specs.add(), specs.rowsum(8)], CUDA0)
    assert seen == [["add_kernel", "rowsum_kernel"]]
    assert not any(k.interpreted for k in first.values())
    again = compile_kernels([specs.add(), specs.rowsum(8)], CUDA0)
    assert seen == [["add_kernel", "rowsum_kernel"]] and again == first  # memo: no second AOT
    with knobs.override(aot_compile=False):
        compile_kernels([specs.add(128)], CUDA0)
    with knobs.override(triton_interpret=True):
        interpreted = compile_kernels([specs.add(256)], CUDA0)["add_kernel"]
    assert seen == [["add_kernel", "rowsum_kernel"]]
    assert interpreted.interpreted
