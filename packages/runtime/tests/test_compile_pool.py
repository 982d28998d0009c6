"""Compiling GPU kernels in worker processes (compile_jobs, compile_worker, compile_pool, aot), on
the CPU: Triton compiles for a named sm_90 target without a GPU, and this process stands a
driver in for the device that reports that target.

The oracle is Triton's own on-disk cache: a worker must write each binary under the key that
this process's `JITFunction.warmup` computes, so the warmup afterwards finds it there and never
reaches Triton's code generator (`ASTSource.make_ir`, watched here); a kernel no worker compiled
does reach it, which shows the check can fail.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from coil.knobs import knobs
from coil.runtime import (
    KernelCompileError,
    KernelSpec,
    TensorArg,
    compile_jobs,
    compile_pool,
    prefetch_kernels,
)
from coil.runtime import aot as aot_module
from coil.runtime.compile import _load
from coil.runtime.compile_pool import CompilePool
from coil.runtime.kernel import Kernel

CUDA0 = torch.device("cuda", 0)


class _Sm90Driver:
    """What Triton's warmup asks of the active driver, for a device that is not there."""

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: int) -> int:
        return 0

    def get_current_target(self) -> Any:
        from triton.backends.compiler import GPUTarget

        return GPUTarget("cuda", 90, 32)


@pytest.fixture
def sm90(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, cache_dir: Path) -> Iterator[Path]:
    """An sm_90 stand-in driver, an empty TRITON_CACHE_DIR (yielded), no interpreter."""
    from triton.runtime.driver import driver

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    triton_cache = tmp_path / "triton-cache"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(triton_cache))
    monkeypatch.setattr(torch.cuda, "device", lambda device: contextlib.nullcontext())
    monkeypatch.setattr(driver, "_active", _Sm90Driver())
    yield triton_cache


@pytest.fixture(scope="module")
def pool() -> Iterator[CompilePool]:
    p = CompilePool(2)
    yield p
    p.close()


def _entries(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()} if folder.exists() else set()


def _kernels(specs: Any, blocks: tuple[int, ...]) -> list[Kernel]:
    return [_load(specs.add(b), CUDA0, False) for b in blocks] + [_load(specs.rowsum(100), CUDA0, False)]


class _Generated(Exception):
    pass


def test_a_worker_fills_the_cache_entry_the_warmup_here_reads(specs: Any, sm90: Path, pool: CompilePool,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from triton.compiler import ASTSource

    generated: list[str] = []

    def make_ir(self: Any, *args: Any, **kwargs: Any) -> Any:
        generated.append(self.fn.__name__)
        raise _Generated(self.fn.__name__)

    kernels = _kernels(specs, (64, 256))
    jobs = compile_jobs.capture(kernels, CUDA0)
    assert all(j is not None for j in jobs)
    assert _entries(sm90) == set()  # capturing compiles nothing
    results = list(pool.run([j for j in jobs if j is not None]))
    assert sorted(i for i, _ in results) == [0, 1, 2] and all(e is None for _, e in results)
    filled = _entries(sm90)
    assert len(filled) >= 3
    monkeypatch.setattr(ASTSource, "make_ir", make_ir)
    for kernel in kernels:
        compile_jobs.warmup(kernel)  # here: found on disk, nothing generated
    assert generated == [] and _entries(sm90) == filled
    with pytest.raises(_Generated):
        compile_jobs.warmup(_load(specs.add(1024), CUDA0, False))  # no worker saw this one
    assert generated == ["add_kernel"]


def test_a_job_that_fails_is_reported_and_the_worker_goes_on(specs: Any, sm90: Path, pool: CompilePool) -> None:
    good, = compile_jobs.capture([_load(specs.add(128), CUDA0, False)], CUDA0)
    assert good is not None
    missing = compile_jobs.CompileJob(good.path, "no_such_kernel", good.specialization, good.target, good.env)
    bad_json = compile_jobs.CompileJob(good.path, good.name, "{not json", good.target, good.env)
    results = dict(pool.run([missing, good, bad_json]))
    assert results[1] is None
    assert results[0] is not None and "AttributeError" in results[0] and "no_such_kernel" in results[0]
    assert results[2] is not None and "JSONDecodeError" in results[2]
    assert pool.live_workers() == 2


def test_a_dead_worker_costs_its_job_not_the_others(specs: Any, sm90: Path) -> None:
    jobs = [j for j in compile_jobs.capture(_kernels(specs, (32,)), CUDA0) if j is not None]
    p = CompilePool(2)
    try:
        p.start()
        victim = p._workers[0]
        victim.proc.kill()
        victim.proc.wait()
        results = dict(p.run(jobs))
        assert set(results) == {0, 1}
        assert sum(e is None for e in results.values()) >= 1  # the live worker compiled the rest
        assert p.live_workers() == 1
        assert dict(p.run(jobs)) == {0: None, 1: None}  # compiled once: the same jobs again are done
        victim2 = p._workers[1]
        victim2.proc.kill()
        victim2.proc.wait()
        fresh = [_load(specs.add(b), CUDA0, False) for b in (16, 2048)]  # jobs no worker saw
        more = [j for j in compile_jobs.capture(fresh, CUDA0) if j is not None]
        assert len(more) == 2
        assert all(e is not None for _, e in p.run(more))  # no worker left: every job reported, none lost
    finally:
        p.close()


def test_precompile_through_workers_compiles_each_kernel_once_and_reports_errors(
        specs: Any, sm90: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bad_source = (
        "import triton\nimport triton.language as tl\n\n@triton.jit\n"
        "def bad(x_ptr, BLOCK: tl.constexpr):\n    tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)\n"
    )
    bad = _load(KernelSpec("bad", bad_source, (TensorArg(torch.float32),), {"BLOCK": 3}), CUDA0, False)
    kernels = _kernels(specs, (64, 512))
    kernels.insert(1, bad)
    sent: list[int] = []
    real_run = CompilePool.run

    def counting_run(self: CompilePool, jobs: Any) -> Any:
        sent.append(len(jobs))
        return real_run(self, jobs)

    monkeypatch.setattr(CompilePool, "run", counting_run)
    with knobs.override(compile_workers=2):
        errors = aot_module.precompile_each(kernels, CUDA0, threads=1)
    assert sent == [4]  # every kernel went to the workers
    assert [e is None for e in errors] == [True, False, True, True]
    error = errors[1]
    assert isinstance(error, KernelCompileError) and error.kernel_name == "bad" and error.stage == "compile"
    filled = _entries(sm90)
    with knobs.override(compile_workers=2):
        assert aot_module.precompile_each(kernels[2:], CUDA0, threads=1) == [None, None]
    assert _entries(sm90) == filled and sent == [4]  # in this process's memory now: no job, no entry


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """One entry per start of a compile pool's workers from now on."""
    calls: list[int] = []
    real_start = CompilePool.start

    def counting_start(self: CompilePool) -> None:
        calls.append(1)
        real_start(self)

    monkeypatch.setattr(CompilePool, "start", counting_start)
    return calls


def test_a_new_process_loads_kernels_compiled_before_without_workers(
        specs: Any, sm90: Path, monkeypatch: pytest.MonkeyPatch, generated: list[str],
        started: list[int]) -> None:
    """A warm start: kernels an earlier process compiled into this Triton cache are loaded here,
    no job goes to a worker (none starts), and none reaches Triton's code generator. Without the
    markers (`compile_jobs.remember_compiled`) the same kernels go to the workers again."""
    from coil.runtime.compile import clear_memo

    spec_list = [specs.add(32), specs.add(2048), specs.rowsum(70)]
    p = CompilePool(2)
    monkeypatch.setattr(compile_pool, "shared_pool", lambda: p)
    try:
        assert aot_module.precompile_each([_load(s, CUDA0, False) for s in spec_list], CUDA0, threads=1) == [None] * 3
        assert started == [1]
        filled = _entries(sm90)
        assert "coil-compiled" in filled
        clear_memo()  # a new process: modules executed again, Triton's in-memory caches empty
        p.close()
        p = CompilePool(2)
        assert aot_module.precompile_each([_load(s, CUDA0, False) for s in spec_list], CUDA0, threads=1) == [None] * 3
        assert started == [1] and generated == []  # no worker started, nothing generated
        import shutil

        shutil.rmtree(sm90 / "coil-compiled")
        clear_memo()
        assert aot_module.precompile_each([_load(s, CUDA0, False) for s in spec_list], CUDA0, threads=1) == [None] * 3
        assert started == [1, 1] and generated == []  # unknown again: sent to the workers, found on disk there
    finally:
        p.close()


@pytest.mark.parametrize("workers", [2, 0])
def test_kernels_compiled_here_on_threads_are_known_to_the_next_process(
        specs: Any, sm90: Path, monkeypatch: pytest.MonkeyPatch, generated: list[str], started: list[int],
        workers: int) -> None:
    """A kernel compiled in the calling thread (alone, as an autotuning problem's last new
    candidate; or with COIL_COMPILE_WORKERS=0) leaves its marker too: the next process's warm start
    loads it here and starts no worker for it (without the marker, one such kernel starts the
    whole pool in every warm start)."""
    from coil.runtime.compile import clear_memo

    p = CompilePool(2)
    monkeypatch.setattr(compile_pool, "shared_pool", lambda: p)
    spec_list = [specs.add(64), specs.rowsum(40)]
    try:
        with knobs.override(compile_workers=workers):
            for s in spec_list:  # one at a time: the thread path
                assert aot_module.precompile_each([_load(s, CUDA0, False)], CUDA0, threads=1) == [None]
        assert started == [] and generated == ["add_kernel", "rowsum_kernel"]
        assert len(_entries(sm90 / "coil-compiled")) == 2
        clear_memo()  # a new process
        with knobs.override(compile_workers=2):
            assert aot_module.precompile_each([_load(s, CUDA0, False) for s in spec_list], CUDA0, threads=1) == [None] * 2
        assert started == [] and generated == ["add_kernel", "rowsum_kernel"]  # loaded from disk here
    finally:
        p.close()


@pytest.fixture
def parsed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The name of each kernel function whose source Triton parses for its cache key from now on
    (`JITFunction.cache_key` runs `parse`; code generation does not go through it here)."""
    from triton.runtime.jit import JITFunction

    names: list[str] = []
    real = JITFunction.parse

    def counting(self: Any) -> Any:
        names.append(self.__name__)
        return real(self)

    monkeypatch.setattr(JITFunction, "parse", counting)
    return names


@pytest.mark.parametrize("workers", [2, 0])
def test_a_warm_start_reuses_each_kernels_cache_key_instead_of_parsing_it(
        specs: Any, sm90: Path, monkeypatch: pytest.MonkeyPatch, generated: list[str], parsed: list[str],
        workers: int) -> None:
    """The marker keeps the function's Triton cache key (`compile_jobs.remember_compiled`): a new
    process gives it to the same function before the warmup (`reuse_cache_key`), which then
    parses no source, generates no code, and loads the binary stored under the key Triton
    computes itself (the same key, checked against a parse in the same process). A marker
    without a key (as before keys were kept, or torn) makes Triton parse again, and gets its key."""
    from coil.runtime.compile import clear_memo

    spec_list = [specs.add(256), specs.rowsum(50)]
    p = CompilePool(2)
    monkeypatch.setattr(compile_pool, "shared_pool", lambda: p)
    try:
        with knobs.override(compile_workers=workers):
            assert aot_module.precompile_each([_load(s, CUDA0, False) for s in spec_list], CUDA0, threads=1) == [None] * 2
            first = sorted(parsed)  # rowsum_kernel's helper _square is parsed too, for rowsum_kernel's key
            assert first == ["_square", "add_kernel", "rowsum_kernel"]
            target = compile_jobs.target_of(CUDA0)
            clear_memo()  # a new process
            kernels = [_load(s, CUDA0, False) for s in spec_list]
            assert all(k.fn.hash is None for k in kernels)
            parsed.clear()
            generated.clear()
            assert aot_module.precompile_each(kernels, CUDA0, threads=1) == [None] * 2
            assert parsed == [] and generated == []
            given = [k.fn.hash for k in kernels]
            for k in kernels:  # what Triton computes for the same source in this process
                k.fn.hash = None
            assert [k.fn.cache_key for k in kernels] == given
            for k in kernels:  # torn or old markers: no key
                compile_jobs._marker(k, target).write_text("not a key\n")
            clear_memo()
            parsed.clear()
            kernels = [_load(s, CUDA0, False) for s in spec_list]
            assert aot_module.precompile_each(kernels, CUDA0, threads=1) == [None] * 2
            assert sorted(parsed) == first and generated == []
            assert [compile_jobs.remembered_key(k, target) for k in kernels] == given  # written again
    finally:
        p.close()


def test_a_job_queued_twice_is_compiled_once(specs: Any, sm90: Path) -> None:
    jobs = [j for j in compile_jobs.capture(_kernels(specs, (8,)), CUDA0) if j is not None]
    p = CompilePool(1)
    sent: list[str] = []
    try:
        p.start()
        worker = p._workers[0]
        call = worker.call

        def counting(request: dict[str, Any]) -> Any:
            sent.append(request["name"])
            return call(request)

        worker.call = counting  # type: ignore[method-assign]
        first = p.run(jobs)  # a prefetch nobody waits for
        assert dict(p.run(jobs + jobs)) == {0: None, 1: None, 2: None, 3: None}
        assert sorted(sent) == sorted(j.name for j in jobs)  # each sent once
        assert dict(first) == {0: None, 1: None}
    finally:
        p.close()


def test_prefetched_kernels_are_compiled_once_and_waited_for(specs: Any, sm90: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[str] = []
    call = compile_pool._Worker.call

    def counting(self: Any, request: dict[str, Any]) -> Any:
        sent.append(request["name"])
        return call(self, request)

    monkeypatch.setattr(compile_pool._Worker, "call", counting)
    spec_list = [specs.add(4), specs.add(4096), specs.rowsum(60)]
    with knobs.override(compile_workers=2):
        prefetch_kernels(spec_list, CUDA0)  # returns at once; the workers get the jobs
        deadline = time.monotonic() + 60
        while len(sent) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sorted(sent) == ["add_kernel", "add_kernel", "rowsum_kernel"]
        errors = aot_module.precompile_each([_load(s, CUDA0, False) for s in spec_list], CUDA0, threads=1)
    assert errors == [None, None, None] and len(sent) == 3  # waited for, not compiled again
    with knobs.override(triton_interpret=True):
        prefetch_kernels([specs.add(8)], CUDA0)  # interpreted: nothing to compile
    assert len(sent) == 3


def test_a_job_is_plain_json(specs: Any, sm90: Path) -> None:
    job, = compile_jobs.capture([_load(specs.add(64), CUDA0, False)], CUDA0)
    assert job is not None
    request = json.loads(json.dumps(job.to_json()))
    assert request["name"] == "add_kernel" and request["target"] == ["cuda", 90, 32]
    assert request["env"]["TRITON_CACHE_DIR"] == str(sm90)
    spec = json.loads(request["specialization"])
    assert spec["constant_vals"] and spec["options"]["num_warps"] == 4
