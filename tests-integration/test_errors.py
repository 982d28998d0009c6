"""Failure behaviour: errors name the stage and node; by default the graph runs eagerly.

Bad inputs at run time: through torch.compile, Dynamo's guards send an input of another dtype,
device or shape to a recompile; a compiled graph called directly checks its inputs before any
kernel runs.
"""

from __future__ import annotations

import warnings
from typing import Any

import coil.lowering_ir.registry as registry
import pytest
import torch
from coil.backend import COMPILED, CoilCompileError, compile_graph
from coil.knobs import knobs
from coil.lowering_ir import decomposition_table
from torch._dynamo.exc import BackendCompilerFailed
from torch.fx.experimental.proxy_tensor import make_fx

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


# -- bad inputs at run time ------------------------------------------------------------------------


def _chain(x: torch.Tensor) -> torch.Tensor:
    return torch.tanh(torch.exp(x) * 2.0 + 1.0).sum(-1)


def test_wrong_dtype_input_recompiles(device: torch.device) -> None:
    fn = torch.compile(_chain, backend="coil")
    x = torch.randn(4, 8, device=device)
    torch.testing.assert_close(fn(x), _chain(x))
    x64 = x.double()  # Dynamo's guards see the dtype change and recompile
    out = fn(x64)
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, _chain(x64))
    assert len(COMPILED) == 2


def test_uncovered_shape_recompiles(device: torch.device) -> None:
    fn = torch.compile(_chain, backend="coil")
    compiled = []
    # Dynamo's guards fail on each new size: it recompiles with that dim dynamic (6: dim 0, 5: dim 1)
    for shape in [(4, 8), (6, 8), (3, 5), (4, 8), (7, 2)]:
        x = torch.randn(*shape, device=device)
        torch.testing.assert_close(fn(x), _chain(x))
        compiled.append(len(COMPILED))
    assert compiled == [1, 2, 3, 3, 3] and all(s.eager_fallback is None for s in COMPILED)


def test_unsupported_device_input_is_a_clear_error(device: torch.device) -> None:
    fn = torch.compile(_chain, backend="coil")
    x = torch.randn(4, 8, device=device)
    torch.testing.assert_close(fn(x), _chain(x))
    meta = torch.randn(4, 8, device="meta")  # the device guard fails: a recompile coil must refuse
    with knobs.override(fallback_on_error=False), pytest.raises(BackendCompilerFailed) as info:
        fn(meta)
    err = info.value.inner_exception
    assert isinstance(err, CoilCompileError) and err.stage == "device"
    assert "tensors on meta" in str(err) and "CUDA and on the CPU" in str(err)


def test_unsupported_device_input_falls_back_to_eager(device: torch.device) -> None:
    meta = torch.randn(4, 8, device="meta")
    with pytest.warns(UserWarning, match="coil failed in stage 'device'"):
        out = torch.compile(_chain, backend="coil")(meta)
    assert out.device.type == "meta" and out.shape == (4,)


@pytest.mark.parametrize("bad", ["shape", "stride", "dtype", "device"])
def test_graph_called_directly_rejects_bad_inputs(device: torch.device, bad: str) -> None:
    x = torch.randn(4, 8, device=device)
    gm = make_fx(lambda x: (_chain(x),), decomposition_table=decomposition_table(), tracing_mode="fake")(x)
    # the wrapper's own check (on the GPU a CUDA-graph runner would take the call: it rejects a
    # wrong shape in its own words and copies a re-strided input into its static buffer)
    with knobs.override(fallback_on_error=False, cuda_graphs=False):
        call = compile_graph(gm, [x], kind="inference")
    torch.testing.assert_close(call([x])[0], _chain(x))
    wrong = {"shape": x[:2], "stride": x.t().contiguous().t(), "dtype": x.half(), "device": x.to("meta")}[bad]
    with pytest.raises(ValueError, match="graph input 0 is not what this graph was compiled for"):
        call([wrong])
