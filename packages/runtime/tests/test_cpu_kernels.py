"""Kernels compiled from KernelSpecs and run on CPU tensors under Triton's interpreter."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from coil.runtime import Kernel, KernelSpec, TensorArg, compile_kernels, interpreter_enabled
from coil.runtime.disk_cache import cache_stats

CPU = torch.device("cpu")


def test_interpreter_enabled() -> None:
    assert interpreter_enabled(CPU)
    assert interpreter_enabled(torch.device("cpu", 0))


@pytest.mark.parametrize("n", [1, 17, 1000, 4097])
def test_pointwise_add(cache_dir: Path, specs: Any, n: int) -> None:
    block = 1024 if n > 1000 else 64
    kernel = compile_kernels([specs.add(block)], CPU)["add_kernel"]
    x, y = torch.randn(n), torch.randn(n)
    out = torch.full((n,), float("nan"))
    kernel(((n + block - 1) // block, 1, 1), x, y, out, n)
    assert torch.allclose(out, x + y)


ROW_SIZES = [(1, 1), (17, 17), (3, 1000), (17, 130)]


@pytest.mark.parametrize(("rows", "cols"), ROW_SIZES)
def test_row_reduction(cache_dir: Path, specs: Any, rows: int, cols: int) -> None:
    kernel = compile_kernels([specs.rowsum(cols)], CPU)["rowsum_kernel"]
    x = torch.randn(rows, cols)
    out = torch.full((rows,), float("nan"))
    kernel((rows,), x, out)
    assert torch.allclose(out, (x * x).sum(dim=1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("rows", "cols"), ROW_SIZES)
def test_row_reduction_runtime_bound(cache_dir: Path, specs: Any, rows: int, cols: int) -> None:
    """A loop over a run-time int (Triton 3.6's interpreter alone fails it under NumPy 2: coil's
    launches convert the bound, coil.runtime.interpreter `_scalar_index`)."""
    kernel = compile_kernels([specs.rowsum_dynamic()], CPU)["rowsum_dynamic"]
    x = torch.randn(rows, cols)
    out = torch.full((rows,), float("nan"))
    kernel((rows,), x, out, cols)
    assert torch.allclose(out, (x * x).sum(dim=1), rtol=1e-5, atol=1e-5)


def test_several_kernels_one_call(cache_dir: Path, specs: Any) -> None:
    kernels = compile_kernels([specs.add(), specs.rowsum(7)], CPU)
    assert sorted(kernels) == ["add_kernel", "rowsum_kernel"]
    assert all(isinstance(k, Kernel) and k.interpreted for k in kernels.values())
    assert cache_stats().writes == 2
    x = torch.randn(5, 7)
    out = torch.empty(5)
    kernels["rowsum_kernel"]((5,), x, out)
    assert torch.allclose(out, (x * x).sum(1), rtol=1e-5, atol=1e-5)


def test_memo_returns_the_same_kernel_without_reloading(cache_dir: Path, specs: Any) -> None:
    first = compile_kernels([specs.add()], CPU)["add_kernel"]
    stats = cache_stats()
    again = compile_kernels([specs.add(), specs.add()], CPU)["add_kernel"]  # equal duplicates: fine
    assert again is first
    assert cache_stats() == stats  # no disk access, no import
    other = compile_kernels([specs.add(block=128)], CPU)["add_kernel"]
    assert other is not first and other.fn is first.fn  # same module, other constexprs
    assert cache_stats() == stats


def test_same_source_is_one_cache_entry_and_names_must_be_unique(cache_dir: Path, specs: Any) -> None:
    compile_kernels([specs.add(64)], CPU)
    files = list(cache_dir.rglob("*.py"))
    assert len(files) == 1
    assert files[0].parent.parent == cache_dir / "kernels"
    f32 = TensorArg(torch.float32)
    clash = KernelSpec("add_kernel", specs.add_source + "\n# other\n", (f32, f32, f32, 8), {"BLOCK": 8})
    with pytest.raises(ValueError, match="add_kernel"):
        compile_kernels([specs.add(64), clash], CPU)


def test_copies_of_one_kernel_under_other_names_share_one_compile(cache_dir: Path, specs: Any) -> None:
    """Each layer of a model has its own copy of a kernel, named apart and headed by a comment
    naming its FX nodes: one load (and, on a GPU, one compile) serves every copy."""
    f32 = TensorArg(torch.float32)

    def copy(i: int, block: int = 64) -> KernelSpec:
        source = f"# kernel add_layer{i}: fused FX nodes add_{i}\n" + specs.add_source.replace("add_kernel", f"add_layer{i}")
        return KernelSpec(f"add_layer{i}", source, (f32, f32, f32, 1024), {"BLOCK": block})

    kernels = compile_kernels([copy(0), copy(1), copy(2), copy(3, block=128)], CPU)
    assert sorted(kernels) == ["add_layer0", "add_layer1", "add_layer2", "add_layer3"]
    assert kernels["add_layer1"] is kernels["add_layer0"] is kernels["add_layer2"]
    assert kernels["add_layer3"] is not kernels["add_layer0"]  # other constexprs: its own
    assert cache_stats().writes == 2  # two modules loaded, not four
    x, y = torch.randn(300), torch.randn(300)
    for name in kernels:
        out = torch.empty(300)
        kernels[name]((5,), x, y, out, 300)
        assert torch.equal(out, x + y), name
    later = compile_kernels([copy(7)], CPU)["add_layer7"]  # another graph's copy: the memo
    assert later is kernels["add_layer0"] and cache_stats().writes == 2
    body = specs.add_source.replace("x + y", "x - y").replace("add_kernel", "add_layer9")
    assert compile_kernels([KernelSpec("add_layer9", body, (f32, f32, f32, 1024), {"BLOCK": 64})],
                           CPU)["add_layer9"] is not later  # another body: another kernel


def test_launch_leaves_triton_in_compiled_mode(cache_dir: Path, specs: Any) -> None:
    """The interpreter switch is scoped: JITFunction.__call__ and tl.* are untouched afterwards."""
    import triton
    import triton.language as tl

    call_before, zeros_before = triton.JITFunction.__call__, tl.zeros
    kernel = compile_kernels([specs.rowsum(3)], CPU)["rowsum_kernel"]
    x = torch.randn(2, 3)
    out = torch.empty(2)
    kernel((2,), x, out)
    assert triton.JITFunction.__call__ is call_before and tl.zeros is zeros_before
    # triton imported with TRITON_INTERPRET unset (nox runs this package alone) has compiled-mode
    # helpers; imported with it set (after triton-codegen's conftest, in one pytest) it has not
    if isinstance(zeros_before, triton.JITFunction):
        assert isinstance(kernel.fn, triton.JITFunction)
    assert "rowsum_kernel" in repr(kernel) and "interpreted" in repr(kernel)


def test_a_launch_that_leaves_triton_language_rebound_is_undone(cache_dir: Path, specs: Any,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Triton 3.6's interpreter rebinds `triton.language` builtins for a launch and never puts
    them back (GPU kernels compiled afterwards in the process then fail). Simulated here: the
    interpreter's launch rebinds `tl.program_id` and `tl.tensor.__add__` and adds a name to
    `tl.tensor`; after coil's launch all three are as before, and the kernel's result is right."""
    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction

    original_run = InterpretedFunction.run
    before = (tl.program_id, tl.tensor.__add__)

    def leaky_run(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original_run(self, *args, **kwargs)
        tl.program_id = lambda *a, **k: None
        tl.tensor.__add__ = lambda *a, **k: None
        tl.tensor.__leaked__ = True
        return result

    monkeypatch.setattr(InterpretedFunction, "run", leaky_run)
    kernel = compile_kernels([specs.rowsum(5)], CPU)["rowsum_kernel"]
    x = torch.randn(3, 5)
    out = torch.full((3,), float("nan"))
    kernel((3,), x, out)
    assert torch.allclose(out, (x * x).sum(dim=1), rtol=1e-5, atol=1e-5)
    assert (tl.program_id, tl.tensor.__add__) == before
    assert not hasattr(tl.tensor, "__leaked__")


GATHER_SOURCE = '''\
import triton
import triton.language as tl


@triton.jit
def gather_kernel(x_ptr, idx_ptr, out_ptr, n, size, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    i = tl.load(idx_ptr + offs, mask=mask, other=0)
    tl.device_assert(((i >= 0) & (i < size)) | ~mask, "gather index out of range")
    tl.store(out_ptr + offs, tl.load(x_ptr + i, mask=mask, other=0), mask=mask)
'''


def _gather_spec(debug: bool) -> KernelSpec:
    args = (TensorArg(torch.float32), TensorArg(torch.int64), TensorArg(torch.float32), 4, 8)
    return KernelSpec("gather_kernel", GATHER_SOURCE, args, {"BLOCK": 4}, debug=debug)


def test_debug_spec_makes_device_asserts_fire(cache_dir: Path) -> None:
    x, out = torch.arange(8.0), torch.zeros(4)
    checked = compile_kernels([_gather_spec(True)], CPU)["gather_kernel"]
    checked((1,), x, torch.tensor([0, 7, 3, 1]), out, 4, 8)
    torch.testing.assert_close(out, torch.tensor([0.0, 7.0, 3.0, 1.0]))
    with pytest.raises(Exception, match="gather index out of range"):
        checked((1,), x, torch.tensor([0, 8, 3, 1]), out, 4, 8)
    # without debug the assert is a no-op (and the interpreter's debug mode was switched back off)
    plain = compile_kernels([_gather_spec(False)], CPU)["gather_kernel"]
    plain((1,), x, torch.tensor([0, 2, 3, 1]), out, 3, 2)  # index 2 >= size 2, not checked
    from triton.runtime import interpreter

    assert not interpreter.interpreter_builder.options.debug


def test_debug_is_part_of_the_spec() -> None:
    assert _gather_spec(True) != _gather_spec(False)
    assert _gather_spec(True).key() != _gather_spec(False).key()
    with pytest.raises(TypeError, match="debug"):
        KernelSpec("k", GATHER_SOURCE, (), debug=1)  # type: ignore[arg-type]
