"""Runtime self-checks (COIL_CHECK_NAN, COIL_CHECK_LIFETIMES, COIL_DEBUG_ASSERTS) and bad inputs."""

from __future__ import annotations

from typing import Any

import coil.backend.compile as backend_compile
import pytest
import torch
from coil.backend import COMPILED, CoilCheckError, knobs
from coil.wrapper_codegen import Allocate, Free, WrapperProgram


def _chain(x: torch.Tensor) -> torch.Tensor:
    return torch.tanh(torch.exp(x) * 2.0 + 1.0).sum(-1)


def test_nan_output_is_caught(device: torch.device) -> None:
    x = -torch.rand(4, 8, device=device) - 0.5  # log of a negative number: NaN
    with knobs.override(check_nan=True), pytest.raises(CoilCheckError, match=r"inference_\d+: output 0 .*NaN"):
        torch.compile(lambda x: torch.log(x) * 2.0, backend="coil")(x)


def test_lifetimes_hold_for_a_kernel_chain(device: torch.device) -> None:
    x = torch.randn(4, 8, device=device)
    with knobs.override(check_lifetimes=True, fusion=False, fallback_on_error=False):
        out = torch.compile(_chain, backend="coil")(x)
    torch.testing.assert_close(out, _chain(x))
    assert "_coil_track.free(" in COMPILED[-1].wrapper_source


def test_injected_lifecycle_violation_is_caught(monkeypatch: pytest.MonkeyPatch, device: torch.device) -> None:
    real_build = backend_compile.build

    def leaky_build(*args: Any, **kwargs: Any) -> WrapperProgram:
        program = real_build(*args, **kwargs)
        allocated = {ln.name for ln in program.lines if isinstance(ln, Allocate)}
        drop = next(i for i, ln in enumerate(program.lines) if isinstance(ln, Free) and ln.name in allocated)
        program.lines.pop(drop)  # that buffer is now never freed
        return program

    monkeypatch.setattr(backend_compile, "build", leaky_build)
    x = torch.randn(4, 8, device=device)
    with knobs.override(check_lifetimes=True, fusion=False, reuse=False, fallback_on_error=False), \
            pytest.raises(CoilCheckError, match="memory lifecycle: allocated but never freed nor returned: buf"):
        torch.compile(_chain, backend="coil")(x)


def test_wrong_dtype_input_recompiles(device: torch.device) -> None:
    fn = torch.compile(_chain, backend="coil")
    x = torch.randn(4, 8, device=device)
    torch.testing.assert_close(fn(x), _chain(x))
    x64 = x.double()  # Dynamo's guards see the dtype change and recompile
    out = fn(x64)
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, _chain(x64))
    assert len(COMPILED) == 2


def test_debug_asserts_catch_an_out_of_bounds_load(monkeypatch: pytest.MonkeyPatch) -> None:
    # On the CPU interpreter only: a device-side assert that fires on a GPU leaves the CUDA
    # context unusable for the rest of the process, so it cannot share a test run.
    x = torch.randn(4, 8)
    with knobs.override(debug_asserts=True, fallback_on_error=False):
        out = torch.compile(_chain, backend="coil")(x)
    torch.testing.assert_close(out, _chain(x))
    assert "tl.device_assert(" in next(iter(COMPILED[-1].kernel_sources.values()))

    torch._dynamo.reset()
    real_generate = backend_compile.generate_schedule

    def off_by_a_lot(*args: Any, **kwargs: Any) -> Any:
        sources = real_generate(*args, **kwargs)
        ks = next(k for k in sources if "tl.load(ptr0 + " in k.source)
        bad = type(ks)(**{**vars(ks), "source": ks.source.replace("tl.load(ptr0 + ", "tl.load(ptr0 + 4096 + ", 1)})
        return [bad if k is ks else k for k in sources]

    monkeypatch.setattr(backend_compile, "generate_schedule", off_by_a_lot)
    with knobs.override(debug_asserts=True, fallback_on_error=False), pytest.raises(Exception, match="coil bounds"):
        torch.compile(_chain, backend="coil")(x)
