"""Runtime self-checks: COIL_CHECK_NAN, COIL_CHECK_LIFETIMES, COIL_DEBUG_ASSERTS (bad inputs: test_errors.py)."""

from __future__ import annotations

from typing import Any

import coil.backend.pipeline.compile as backend_compile
import pytest
import torch
from coil.backend import COMPILED, CoilCheckError
from coil.knobs import knobs
from coil.wrapper_codegen import Allocate, Free, Place, WrapperProgram


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


def _two_live(x: torch.Tensor) -> torch.Tensor:
    # two transposed copies live together until their product's sum: both placed in the arena
    a = x.t().contiguous() * 2.0
    b = (x + 1.0).t().contiguous()
    return (torch.softmax(a, -1) * torch.softmax(b, -1)).sum(-1)


def test_lifetimes_hold_with_buffers_placed_in_an_arena(device: torch.device) -> None:
    x = torch.randn(16, 8, device=device)
    with knobs.override(check_lifetimes=True, fusion=False, arena=True, fallback_on_error=False):
        out = torch.compile(_two_live, backend="coil")(x)
    torch.testing.assert_close(out, _two_live(x))
    assert "_coil_track.place(" in COMPILED[-1].wrapper_source
    assert COMPILED[-1].arena_bytes and all(n >= bound for n, bound in COMPILED[-1].arena_bytes)


@pytest.mark.parametrize("where", ["plan", "lines"])
def test_arena_placement_violation_is_caught(monkeypatch: pytest.MonkeyPatch, device: torch.device,
                                             where: str) -> None:
    """Every buffer moved to byte 0: in the lines only, the address differs from the plan; in the
    plan and the lines alike, two live buffers share bytes. The tracker names either."""
    real_build = backend_compile.build

    def crowded_build(*args: Any, **kwargs: Any) -> WrapperProgram:
        program = real_build(*args, **kwargs)
        program.lines = [Place(ln.name, ln.arena, 0, ln.size, ln.stride, ln.dtype) if isinstance(ln, Place) else ln
                         for ln in program.lines]
        if where == "plan":
            for a in program.arenas:
                a.offsets.update(dict.fromkeys(a.offsets, 0))
        return program

    monkeypatch.setattr(backend_compile, "build", crowded_build)
    x = torch.randn(16, 8, device=device)
    message = "is placed over bytes of buf" if where == "plan" else "the plan says byte"
    with knobs.override(check_lifetimes=True, fusion=False, arena=True, fallback_on_error=False), \
            pytest.raises(CoilCheckError, match=message):
        torch.compile(_two_live, backend="coil")(x)


def _embed(w: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.embedding(i, w) * 2.0


def test_debug_asserts_catch_an_out_of_range_index() -> None:
    # On the CPU interpreter only: a device-side assert that fires on a GPU leaves the CUDA
    # context unusable for the rest of the process, so it cannot share a test run.
    w, good, bad = torch.randn(10, 4), torch.tensor([1, 9, 0]), torch.tensor([1, 10, 0])
    fn = torch.compile(_embed, backend="coil")
    with knobs.override(debug_asserts=True, fallback_on_error=False):
        torch.testing.assert_close(fn(w, good), _embed(w, good))
        sources = "\n".join(COMPILED[-1].kernel_sources.values())
        assert sources.count("tl.device_assert(") == 2  # the row index, then the storage index
        with pytest.raises(Exception, match=r"coil bounds: \w+ load of \w+: an index is outside \[0, 10\)"):
            fn(w, bad)


def test_without_debug_asserts_kernels_hold_none() -> None:
    w, i = torch.randn(10, 4), torch.tensor([1, 9, 0])
    with knobs.override(fallback_on_error=False):
        torch.testing.assert_close(torch.compile(_embed, backend="coil")(w, i), _embed(w, i))
    assert COMPILED[-1].kernel_sources
    assert not any("device_assert" in s for s in COMPILED[-1].kernel_sources.values())
