"""GPU tests: ahead-of-time compilation really happens before the first launch.

Run on a GPU (`pytest -m gpu`; bench/gpu_tests.sh on the device machine); skipped where CUDA is
absent.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from coil.knobs import knobs
from coil.runtime import KernelCompileError, KernelSpec, TensorArg, compile_kernels

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (none found)"),
]


@pytest.fixture
def compiles() -> Any:
    """Counts Triton compilations (jit_cache_hook runs before each one) while the test runs."""
    import triton

    seen: list[bool] = []

    def hook(*args: object, **kwargs: object) -> None:
        seen.append(bool(kwargs.get("is_manual_warmup")))

    with triton.knobs.runtime.scope():
        triton.knobs.runtime.jit_cache_hook = hook
        yield seen


def test_aot_then_launch_without_compiling(cache_dir: Path, specs: Any, compiles: Any) -> None:
    device = torch.device("cuda")
    blocks = (64, 128, 256, 1024)  # four kernels: the first compiles serially, three in the pool
    names = [f"add_{b}" for b in blocks]
    f32 = TensorArg(torch.float32)
    spec_list = [
        KernelSpec(name, specs.add_source.replace("add_kernel", name), (f32, f32, f32, 1024),
                   {"BLOCK": b})
        for name, b in zip(names, blocks, strict=True)
    ]
    with knobs.override(compile_threads=4):
        kernels = compile_kernels(spec_list, device)
    assert len(compiles) == len(blocks) and all(compiles)  # all compiled by warmup
    compiles.clear()
    n = 1024 * 37  # divisible by 16, like the example value: the same specialisation
    x, y = torch.randn(n, device=device), torch.randn(n, device=device)
    for name, block in zip(names, blocks, strict=True):
        out = torch.empty_like(x)
        kernels[name](((n + block - 1) // block,), x, y, out, n)
        assert torch.allclose(out, x + y)
    torch.cuda.synchronize()
    assert compiles == []  # no launch compiled anything
    assert not any(k.interpreted for k in kernels.values())


def test_worker_processes_compile_and_this_process_only_loads(
        cache_dir: Path, specs: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, generated: list[str]) -> None:
    """With compile workers, Triton's code generator never runs in this process (each binary is
    found in Triton's disk cache, where a worker put it), and the kernels compute x + y."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))
    device = torch.device("cuda")
    blocks = (64, 128, 256, 512, 1024)
    f32 = TensorArg(torch.float32)
    spec_list = [KernelSpec(f"addw_{b}", specs.add_source.replace("add_kernel", f"addw_{b}"), (f32, f32, f32, 1024),
                            {"BLOCK": b}) for b in blocks]
    with knobs.override(compile_workers=2):
        kernels = compile_kernels(spec_list, device)
    assert generated == []
    n = 1024 * 37
    x, y = torch.randn(n, device=device), torch.randn(n, device=device)
    for spec, block in zip(spec_list, blocks, strict=True):
        out = torch.empty_like(x)
        kernels[spec.name](((n + block - 1) // block,), x, y, out, n)
        assert torch.equal(out, x + y)
    assert generated == []


def test_row_reduction_on_gpu(cache_dir: Path, specs: Any) -> None:
    kernels = compile_kernels([specs.rowsum_dynamic()], torch.device("cuda"))
    for rows, cols in [(1, 1), (17, 17), (64, 1000)]:
        x = torch.randn(rows, cols, device="cuda")
        out = torch.empty(rows, device="cuda")
        kernels["rowsum_dynamic"]((rows,), x, out, cols)
        assert torch.allclose(out, (x * x).sum(1), rtol=1e-4, atol=1e-4)


def test_compile_error_on_gpu(cache_dir: Path) -> None:
    source = (
        "import triton\nimport triton.language as tl\n\n@triton.jit\n"
        "def bad(x_ptr, BLOCK: tl.constexpr):\n    tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)\n"
    )
    spec = KernelSpec("bad", source, (TensorArg(torch.float32),), {"BLOCK": 3})  # not a power of 2
    with pytest.raises(KernelCompileError) as info:
        compile_kernels([spec], torch.device("cuda"))
    assert info.value.stage == "compile" and info.value.kernel_name == "bad"


MIX_SOURCE = '''\
import triton
import triton.language as tl


@triton.jit
def mix_after_interpreter(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 3 + 1, mask=mask)
'''


def test_a_gpu_kernel_compiles_after_a_cpu_kernel_ran_interpreted(cache_dir: Path, specs: Any) -> None:
    """One process, a CPU kernel (Triton's interpreter) first, then a GPU kernel never compiled
    before: Triton 3.6's interpreter leaves `triton.language` rebound, and the GPU compile fails
    ('ir.value' object has no attribute 'dtype') unless coil restores it after each launch."""
    cpu = compile_kernels([specs.rowsum(6)], torch.device("cpu"))["rowsum_kernel"]
    x = torch.randn(2, 6)
    out = torch.empty(2)
    cpu((2,), x, out)
    assert torch.allclose(out, (x * x).sum(1), rtol=1e-5, atol=1e-5)
    spec = KernelSpec("mix_after_interpreter", MIX_SOURCE,
                      (TensorArg(torch.float32), TensorArg(torch.float32), 4), {"BLOCK": 128})
    gpu = compile_kernels([spec], torch.device("cuda"))["mix_after_interpreter"]
    y = torch.randn(300, device="cuda")
    got = torch.empty_like(y)
    gpu((3, 1, 1), y, got, 300)
    torch.testing.assert_close(got, y * 3 + 1)
