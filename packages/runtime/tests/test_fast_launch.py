"""The fast launch path, checked on the CPU: keys against Triton's own specialisation, the
generated launcher's calls for each launcher layout, and Kernel's bind/miss logic (with a stand-in
driver and compiled kernel). The real launches are in test_gpu_fast.py.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
import torch
from coil.knobs import knobs
from coil.runtime import Kernel, KernelSpec, TensorArg, fast_launch
from coil.runtime.compile import compile_kernels

CUDA0 = torch.device("cuda", 0)

INTS = [1, 0, 2, 15, 16, 17, 32, -1, -16, -17, 2**31 - 16, 2**31 - 1, 2**31, 2**31 + 16,
        -(2**31), -(2**31) - 1, -(2**31) - 16, 2**63 - 16, 2**63 - 1, 2**63, 2**63 + 16,
        2**64 - 1, 2**64 - 16]


def triton_spec(arg: object, specialize: bool = True, align: bool = True) -> tuple[object, ...]:
    from triton._C.libtriton import native_specialize_impl
    from triton.backends.compiler import BaseBackend

    return tuple(native_specialize_impl(BaseBackend, arg, False, specialize, align))


@pytest.mark.parametrize("kind", ["int", "int_nospec"])
def test_int_key_is_at_least_as_fine_as_triton(kind: str) -> None:
    specialize = kind == "int"
    seen: dict[tuple[object, ...], tuple[object, ...]] = {}
    for v in INTS:
        key = fast_launch.python_key([kind], 0, (v,))
        spec = triton_spec(v, specialize=specialize)
        assert seen.setdefault(key, spec) == spec, (v, key, spec)
    assert len(set(seen.values())) >= (7 if specialize else 3)  # constexpr 1, i32/i64/u64 x D


@pytest.mark.parametrize("kind", ["ptr", "ptr_noalign"])
def test_pointer_key_is_at_least_as_fine_as_triton(kind: str) -> None:
    align = kind == "ptr"
    seen: dict[tuple[object, ...], tuple[object, ...]] = {}
    for dtype in (torch.float32, torch.bfloat16, torch.int64, torch.bool, torch.uint8):
        base = torch.empty(64, dtype=dtype)
        for offset in range(0, 20):
            t = base[offset:]
            key = fast_launch.python_key([kind], 0, (t,))
            spec = triton_spec(t, align=align)
            assert seen.setdefault(key, spec) == spec, (dtype, offset)


def test_generated_key_equals_python_key() -> None:
    kinds = ["ptr", "ptr_noalign", "int", "int_nospec"]
    got: list[object] = []

    def miss(key: object, grid: object, args: object) -> None:
        got.append(key)

    launch = fast_launch.make_launch(kinds, (), "flat", {}, miss, lambda: 3, lambda d: 0,
                                     _Rt())
    x = torch.empty(40, dtype=torch.float16)
    for args in itertools.product([x, x[1:], x[8:]], [x[3:]], [1, 16, 2**40], [5, 2**63]):
        got.clear()
        launch((1,), *args)
        assert got == [fast_launch.python_key(kinds, 3, args)]
    got.clear()
    launch((1,), 5, x, 1, 1)  # an int where a pointer goes: no key, always the slow path
    assert got == [None]


class _Rt:
    """Stands in for triton.knobs.runtime: empty hook chains."""

    def __init__(self) -> None:
        self.launch_enter_hook = _Chain()
        self.launch_exit_hook = _Chain()


class _Chain:
    def __init__(self) -> None:
        self.calls: list[object] = []


class _FlatLauncher:
    """Triton 3.6's CudaLauncher shape: __call__(gridX, gridY, gridZ, stream, function, *args)."""

    def __init__(self, log: list[tuple[object, ...]]) -> None:
        self.log = log
        self.launch_cooperative_grid = False
        self.launch_pdl = False

    def launch(self, *args: object) -> None:
        self.log.append(("c", *args))

    def __call__(self, gridX: int, gridY: int, gridZ: int, stream: int, function: object,
                 *args: object) -> None:
        self.log.append(("py", gridX, gridY, gridZ, stream, function, *args))


class _PackedLauncher(_FlatLauncher):
    """Triton 3.9's CudaLauncher shape: a generic launch plus annotations and a signature."""

    arg_annotations = ("ann",)
    kernel_signature = b"sig"

    def __call__(self, gridX: int, gridY: int, gridZ: int, stream: int, function: object,  # type: ignore[override]
                 kernel_metadata: object, launch_metadata: object, enter: object, exit: object,
                 *args: object) -> None:
        self.log.append(("py", gridX, gridY, gridZ, stream, function, kernel_metadata, *args))


class _Metadata:
    def __init__(self, scratch: int) -> None:
        self.global_scratch_size = scratch
        self.profile_scratch_size = 0


class _Compiled:
    def __init__(self, launcher: _FlatLauncher, scratch: int = 0) -> None:
        self.run = launcher
        self.function = 0xF
        self.packed_metadata = (4, 1, 0)
        self.metadata = _Metadata(scratch)


@pytest.mark.parametrize("layout", ["flat", "packed"])
@pytest.mark.parametrize("scratch", [0, 256])
def test_launcher_calls_per_layout(layout: str, scratch: int) -> None:
    log: list[tuple[object, ...]] = []
    launcher = _FlatLauncher(log) if layout == "flat" else _PackedLauncher(log)
    compiled = _Compiled(launcher, scratch)
    assert fast_launch.layout_of(compiled) == layout
    x = torch.empty(16)
    kinds = ["ptr", "int"]
    key = fast_launch.python_key(kinds, 0, (x, 32))
    table = {key: fast_launch.bind_entry(compiled, layout)}
    misses: list[object] = []
    launch = fast_launch.make_launch(kinds, (64,), layout, table,
                                     lambda *a: misses.append(a), lambda: 0, lambda d: 99, _Rt())
    launch((2, 3), x, 32)
    assert misses == []
    if scratch:  # needs scratch memory: the portable CompiledKernel.run convention
        assert log == [("py", 2, 3, 1, 99, 0xF, (4, 1, 0), None, None, None, x, 32, 64)
                       if layout == "flat" else
                       ("py", 2, 3, 1, 99, 0xF, (4, 1, 0), x, 32, 64)]
    elif layout == "flat":
        assert log == [("c", 2, 3, 1, 99, 0xF, False, False, None, None, (4, 1, 0), None, None,
                        None, x, 32, 64)]
    else:
        assert log == [("c", 2, 3, 1, 99, 0xF, False, False, (4, 1, 0), None, None, None, None,
                        None, ("ann",), b"sig", (x, 32, 64))]
    log.clear()
    launch((2, 3, 4), x[1:], 32)  # unaligned: a key never bound
    launch((5,), x, 1)  # an int that becomes a constexpr
    assert log == [] and len(misses) == 2


def test_installed_hooks_take_the_slow_path() -> None:
    log: list[tuple[object, ...]] = []
    compiled = _Compiled(_FlatLauncher(log))
    x = torch.empty(16)
    rt = _Rt()
    table = {fast_launch.python_key(["ptr"], 0, (x,)): fast_launch.bind_entry(compiled, "flat")}
    misses: list[object] = []
    launch = fast_launch.make_launch(["ptr"], (), "flat", table, lambda *a: misses.append(a),
                                     lambda: 0, lambda d: 0, rt)
    launch((1,), x)
    rt.launch_enter_hook.calls.append(print)
    launch((1,), x)
    rt.launch_enter_hook.calls.clear()
    rt.launch_exit_hook = _Chain()  # reassigned knob
    launch((1,), x)
    assert len(log) == 1 and len(misses) == 2


def test_plan_params(cache_dir: Path, specs: Any) -> None:
    fn = compile_kernels([specs.add()], torch.device("cpu"))["add_kernel"].fn
    plan = fast_launch.plan_params(fn, specs.add().args, {"BLOCK": 64}, TensorArg)
    assert plan is not None and plan.kinds == ["ptr", "ptr", "ptr", "int"]
    assert plan.trailing == (64,)
    assert fast_launch.plan_params(fn, specs.add().args[:3], {"BLOCK": 64}, TensorArg) is None


class _FakeDriver:
    def get_current_stream(self, device: int) -> int:
        return 1234

    def get_current_device(self) -> int:
        return 0


@pytest.fixture
def fake_cuda(monkeypatch: pytest.MonkeyPatch) -> Any:
    from triton.runtime import driver

    monkeypatch.setattr(torch._C, "_cuda_getDevice", lambda: 0, raising=False)
    monkeypatch.setattr(driver, "_active", _FakeDriver())  # restored as it was (maybe None)
    fast_launch._layout_cache.clear()
    yield
    fast_launch._layout_cache.clear()


def test_kernel_binds_after_first_launch_and_falls_back(cache_dir: Path, specs: Any,
                                                        fake_cuda: None) -> None:
    fn = compile_kernels([specs.add()], torch.device("cpu"))["add_kernel"].fn
    kernel = Kernel(specs.add(), fn, cache_dir / "k.py", CUDA0, False)
    log: list[tuple[object, ...]] = []
    runs: list[tuple[object, ...]] = []

    def run(*args: object, grid: object, warmup: bool, **kwargs: object) -> _Compiled:
        runs.append(args)
        return _Compiled(_FlatLauncher(log))

    kernel._run = run
    assert not kernel.fast
    x = torch.empty(64)
    kernel((4,), x, x, x, 64)  # first launch: through run(), then bound
    assert kernel.fast and len(runs) == 1 and log == []
    kernel((4,), x, x, x, 48)  # same key: the C launcher, run() not called
    assert len(runs) == 1 and log[0][0] == "c" and log[0][-5:] == (x, x, x, 48, 64)
    kernel((4,), x, x[2:], x, 48)  # unaligned pointer: run(), then bound
    kernel((4,), x, x[2:], x, 48)
    kernel((4,), x, x, x, 1)  # n == 1
    kernel((4,), x, x, x, 17)  # not divisible by 16
    assert len(runs) == 4 and len(kernel.bound_keys) == 4 and len(log) == 2


def test_fast_launch_knob_and_interpreter_keep_the_slow_path(cache_dir: Path, specs: Any) -> None:
    fn = compile_kernels([specs.add()], torch.device("cpu"))["add_kernel"].fn
    with knobs.override(fast_launch=False):
        assert Kernel(specs.add(), fn, cache_dir / "k.py", CUDA0, False)._plan is None
    assert Kernel(specs.add(), fn, cache_dir / "k.py", CUDA0, True)._plan is None
    assert Kernel(specs.add(), fn, cache_dir / "k.py", torch.device("cpu"), False)._plan is None
    interleaved = KernelSpec("add_kernel", specs.add_source, (TensorArg(torch.float32),) * 3 + (8,),
                             {"BLOCK": 64, "EXTRA": 1})
    assert Kernel(interleaved, fn, cache_dir / "k.py", CUDA0, False)._plan is None


def test_cuda_graph_runner_needs_cuda_tensors() -> None:
    from coil.runtime import CudaGraphRunner

    with pytest.raises(ValueError, match="one CUDA device"):
        CudaGraphRunner(lambda args: (args[0] + 1,), [torch.ones(2)])
