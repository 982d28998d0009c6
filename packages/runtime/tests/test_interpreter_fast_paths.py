"""What coil's interpreted launches skip of Triton's interpreter (coil.runtime.interpreter):
reductions with coil's combine functions run through numpy (step 5: the same results as eager,
NaN included, without the element-by-element fallback), and no launch computes Triton's int32
overflow check (`_builder_options`)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from coil.runtime import KernelSpec, TensorArg, compile_kernels

CPU = torch.device("cpu")

# the combine helpers as triton-codegen's kernel.py writes them, and one coil does not know
SOURCE = '''\
import triton
import triton.language as tl


@triton.jit
def _coil_mul(a, b):
    return a * b


@triton.jit
def _coil_max_nan(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _coil_min_nan(a, b):
    return tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _other_add(a, b):
    return a + b


@triton.jit
def rows_kernel(x_ptr, out_ptr, ROWS: tl.constexpr, COLS: tl.constexpr, WHICH: tl.constexpr):
    r = tl.arange(0, ROWS)[:, None]
    c = tl.arange(0, COLS)[None, :]
    x = tl.load(x_ptr + r * COLS + c)
    if WHICH == 0:
        y = tl.reduce(x, 1, _coil_max_nan)
    elif WHICH == 1:
        y = tl.reduce(x, 1, _coil_min_nan)
    elif WHICH == 2:
        y = tl.reduce(x, 1, _coil_mul)
    else:
        y = tl.reduce(x, 1, _other_add)
    tl.store(out_ptr + tl.arange(0, ROWS), y)
'''

EAGER = [lambda x: x.amax(1), lambda x: x.amin(1), lambda x: x.prod(1), lambda x: x.sum(1)]


def _spec(which: int, dtype: torch.dtype, rows: int, cols: int) -> KernelSpec:
    t = TensorArg(dtype)
    return KernelSpec("rows_kernel", SOURCE, (t, t), {"ROWS": rows, "COLS": cols, "WHICH": which})


def _rows(dtype: torch.dtype, rows: int, cols: int) -> torch.Tensor:
    torch.manual_seed(0)
    if dtype.is_floating_point:
        x = torch.rand(rows, cols, dtype=dtype) + 0.5
        x[1, 3] = float("nan")  # a NaN in a row: max and min return it, as eager does
        x[2, :] = float("nan")
        return x
    return torch.randint(-3, 4, (rows, cols), dtype=dtype)  # products wrap around


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int32, torch.int8])
@pytest.mark.parametrize("which", [0, 1, 2])
def test_coils_combines_match_eager_without_the_element_by_element_path(
        cache_dir: Path, monkeypatch: pytest.MonkeyPatch, which: int, dtype: torch.dtype) -> None:
    from triton.runtime.interpreter import ReduceOps

    def slow(*a: object, **k: object) -> object:
        raise AssertionError("the element-by-element reduction ran")

    monkeypatch.setattr(ReduceOps, "generic_reduce", slow)
    before = ReduceOps.__dict__["apply_impl"]
    rows, cols = 4, 64
    x = _rows(dtype, rows, cols)
    out = torch.empty(rows, dtype=dtype)
    compile_kernels([_spec(which, dtype, rows, cols)], CPU)["rows_kernel"]((1,), x, out)
    torch.testing.assert_close(out, EAGER[which](x).to(dtype), equal_nan=True, rtol=1e-5, atol=0)
    assert ReduceOps.__dict__["apply_impl"] is before  # put back after the launch


def test_another_combine_still_goes_to_the_interpreter(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from triton.runtime.interpreter import ReduceOps

    calls: list[int] = []
    generic = ReduceOps.generic_reduce

    def counted(self: object, *a: object) -> object:
        calls.append(1)
        return generic(self, *a)  # type: ignore[arg-type]

    monkeypatch.setattr(ReduceOps, "generic_reduce", counted)
    x = torch.randn(4, 8)
    out = torch.empty(4)
    compile_kernels([_spec(3, torch.float32, 4, 8)], CPU)["rows_kernel"]((1,), x, out)
    torch.testing.assert_close(out, x.sum(1), rtol=1e-5, atol=1e-5)
    assert calls == [1]


def test_launches_run_without_the_overflow_check_and_put_the_options_back(
        cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Outside debug mode the interpreter computed Triton's int32 overflow check for every integer
    operation and dropped it (its assert off); coil's launches turn the check off, in debug mode
    too (Philox wraps on purpose), and put the builder's options back after the launch."""
    from triton.runtime import interpreter

    seen: list[tuple[bool, bool]] = []
    add = interpreter.InterpreterBuilder.create_add

    def recorded(self: object, lhs: object, rhs: object) -> object:
        seen.append((self.options.sanitize_overflow, self.options.debug))  # type: ignore[attr-defined]
        return add(self, lhs, rhs)

    monkeypatch.setattr(interpreter.InterpreterBuilder, "create_add", recorded)
    before = interpreter.interpreter_builder.options
    x = torch.arange(8, dtype=torch.int32)
    out = torch.empty(2, dtype=torch.int32)
    for debug in (False, True):
        spec = KernelSpec("rows_kernel", SOURCE, (TensorArg(torch.int32), TensorArg(torch.int32)),
                          {"ROWS": 2, "COLS": 4, "WHICH": 3}, debug=debug)
        seen.clear()
        compile_kernels([spec], CPU)["rows_kernel"]((1,), x, out)
        torch.testing.assert_close(out, x.view(2, 4).sum(1).to(torch.int32))
        assert seen and set(seen) == {(False, debug)}
        assert interpreter.interpreter_builder.options is before


LOOP_SOURCE = '''\
import triton
import triton.language as tl


@triton.jit
def loop_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    hi = tl.maximum(n, 0)  # a bound computed from a run-time int, as the attention kernels' are
    for start in range(0, hi, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr, tl.sum(acc, 0))
'''


@pytest.mark.parametrize("n", [1, 7, 40])
def test_a_loop_over_a_run_time_bound_runs_interpreted(cache_dir: Path, n: int) -> None:
    """A run-time int reaches the interpreter as a one-element 1-D array; Triton before 3.9 made
    it a `range` bound with `int(array)`, which NumPy 2 refuses. The conversion coil sets
    (`_scalar_index`) takes any one-element array, and the interpreter's is back after the launch."""
    import triton.language as tl

    before = tl.tensor.__dict__.get("__index__")
    spec = KernelSpec("loop_kernel", LOOP_SOURCE, (TensorArg(torch.float32), TensorArg(torch.float32), 0),
                      {"BLOCK": 16})
    x = torch.randn(n)
    out = torch.empty(1)
    compile_kernels([spec], CPU)["loop_kernel"]((1,), x, out, n)
    torch.testing.assert_close(out[0], x.sum(), rtol=1e-5, atol=1e-5)
    assert tl.tensor.__dict__.get("__index__") is before


def test_one_element_arrays_of_any_rank_convert_to_an_int() -> None:
    import numpy as np
    from coil.runtime.interpreter import _index

    for data in (np.array(5), np.array([5]), np.array([[5]])):
        assert _index(SimpleNamespace(handle=SimpleNamespace(data=data))) == 5
    with pytest.raises(TypeError):
        _index(SimpleNamespace(handle=SimpleNamespace(data=np.array([1, 2]))))
