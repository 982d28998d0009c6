"""Failure behaviour: errors name the stage and node; by default the graph runs eagerly."""

from __future__ import annotations

import warnings
from typing import Any

import coil.lowering_ir.registry as registry
import pytest
import torch
from coil.backend import COMPILED, CoilCompileError, knobs
from torch._dynamo.exc import BackendCompilerFailed

aten = torch.ops.aten


def _broken(*args: Any, **kwargs: Any) -> Any:
    raise ValueError("injected failure")


def _fn(x: torch.Tensor) -> torch.Tensor:
    return torch.exp(x) * 2.0 + 1.0


def test_compile_error_names_stage_and_node(monkeypatch: pytest.MonkeyPatch, device: torch.device) -> None:
    monkeypatch.setitem(registry.LOWERINGS, aten.exp.default, _broken)
    x = torch.randn(16, device=device)
    with knobs.override(fallback_on_error=False), pytest.raises(BackendCompilerFailed) as info:
        torch.compile(_fn, backend="coil")(x)
    err = info.value.inner_exception
    assert isinstance(err, CoilCompileError)
    assert err.stage == "lowering"
    assert err.node == "exp"
    assert "injected failure" in str(err) and "aten.exp" in str(err)


def test_compile_error_falls_back_to_eager_with_one_warning(monkeypatch: pytest.MonkeyPatch, device: torch.device) -> None:
    monkeypatch.setitem(registry.LOWERINGS, aten.exp.default, _broken)
    x = torch.randn(16, device=device)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = torch.compile(_fn, backend="coil")(x)
    torch.testing.assert_close(out, _fn(x))
    coil_warnings = [w for w in caught if "coil failed in stage 'lowering'" in str(w.message)]
    assert len(coil_warnings) == 1
    assert COMPILED[-1].eager_fallback is not None


def test_knob_rejects_bad_names() -> None:
    with pytest.raises(KeyError), knobs.override(no_such_knob=1):
        pass
