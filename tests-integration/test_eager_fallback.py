"""A graph coil fails to compile costs no more than eager (COIL_FALLBACK_ON_ERROR, on by default).

Under torch.compile the whole Dynamo graph then runs as captured: the ATen ops it executes are
eager's, one for one (not the many small ops of coil's decompositions), and so are its values
and gradients, whether the forward, inference or backward graph failed, AOTAutograd itself (an
error Dynamo acts on, IndexError, still reaches the user) or a pre-grad pass; and a pre-grad pass
that edited Dynamo's graph wrongly does not change what the fallback runs. A failed graph is
never cached as compiled. A graph compiled directly (`compile_graph`) falls back alone.
"""

from __future__ import annotations

import copy
import operator
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import coil.backend.pipeline.backend as backend_mod
import coil.backend.pipeline.compile as compile_mod
import coil.backend.pipeline.fallback as fallback_mod
import coil.lowering_ir.registry as registry
import pytest
import torch
from coil.backend import COMPILED, compile_graph
from coil.backend.caches import frontend_cache, graph_cache
from coil.backend.stats import BACKEND_CALLS
from coil.knobs import knobs
from coil.lowering_ir import decomposition_table
from models import TransformerBlock
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten


class _Ops(TorchDispatchMode):
    """Records every ATen op that reaches the dispatcher, compiled code included: a mode that
    ignores compile internals does not make Dynamo run the frame uncompiled."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        return True

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def _ops(fn: Callable[[], Any]) -> list[str]:
    with _Ops() as mode:
        fn()
    return mode.ops


def _raising(error: type[Exception]) -> Callable[..., Any]:
    def fail(*args: Any, **kwargs: Any) -> Any:
        raise error("injected failure")
    return fail


_broken = _raising(ValueError)


def _fail_lowering_of(monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    """Every `kind` graph fails in stage 'lowering'."""
    lower = compile_mod.lower

    def failing(gm: torch.fx.GraphModule, name: str, **kwargs: Any) -> Any:
        if name.startswith(kind):
            raise ValueError("injected failure")
        return lower(gm, name, **kwargs)

    monkeypatch.setattr(compile_mod, "lower", failing)


@pytest.fixture
def caught() -> Iterator[list[warnings.WarningMessage]]:
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        yield got


def _coil_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if "coil failed in stage" in str(w.message)]


def _model(device: torch.device) -> tuple[TransformerBlock, torch.Tensor]:
    torch.manual_seed(0)
    return TransformerBlock().to(device), torch.randn(2, 8, 32, device=device)


def test_inference_graph_that_fails_runs_eagers_ops(monkeypatch: pytest.MonkeyPatch, device: torch.device,
                                                    caught: list[warnings.WarningMessage]) -> None:
    monkeypatch.setitem(registry.LOWERINGS, aten.rsqrt.default, _broken)  # layer norm, decomposed
    model, x = _model(device)
    compiled = torch.compile(model, backend="coil")
    with torch.no_grad():
        first = compiled(x)
        want = model(x)
        eager_ops = _ops(lambda: model(x))
        fallback_ops = _ops(lambda: compiled(x))
    torch.testing.assert_close(first, want)
    assert fallback_ops == eager_ops  # no decomposed op: eager's ATen ops, one for one
    (message,) = _coil_warnings(caught)
    (stats,) = COMPILED
    assert f"coil failed in stage 'lowering' compiling {stats.name} at node 'rsqrt'" in message
    assert "running this graph eagerly" in message
    assert stats.eager_fallback is not None and "rsqrt" in stats.eager_fallback
    assert BACKEND_CALLS[-1].eager_fallback == stats.eager_fallback


def _train_step(model: torch.nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    out = model(x)
    out.square().sum().backward()
    return out.detach(), [p.grad for p in model.parameters() if p.grad is not None]


# without torch's AOTAutograd cache, the backward is still compiled with the forward
@pytest.mark.parametrize(("failing", "aot_cache"), [("forward", "1"), ("backward", "1"), ("backward", "0")])
def test_training_graph_that_fails_runs_eagers_ops(monkeypatch: pytest.MonkeyPatch, device: torch.device,
                                                   caught: list[warnings.WarningMessage], failing: str,
                                                   aot_cache: str) -> None:
    monkeypatch.setenv("COIL_AOT_CACHE", aot_cache)
    _fail_lowering_of(monkeypatch, failing)
    model, x = _model(device)
    twin = copy.deepcopy(model)
    compiled = torch.compile(twin, backend="coil")
    got, got_grads = _train_step(compiled, x)
    want, want_grads = _train_step(model, x)
    torch.testing.assert_close(got, want)
    assert len(got_grads) == len(want_grads) == len(list(model.parameters()))
    for g, w in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(g, w)
    eager_ops = _ops(lambda: _train_step(model, x))
    fallback_ops = _ops(lambda: _train_step(compiled, x))
    assert fallback_ops == eager_ops  # forward and backward: eager's ATen ops, one for one
    (message,) = _coil_warnings(caught)
    assert f"coil failed in stage 'lowering' compiling {failing}_" in message
    # every graph of the Dynamo graph runs eagerly: a forward compiled before its backward failed too
    assert COMPILED and all(s.eager_fallback is not None for s in COMPILED), [s.eager_fallback for s in COMPILED]
    assert [s.name.split("_")[0] for s in COMPILED] == (["forward"] if failing == "forward" else ["forward", "backward"])
    assert [c.aot_cache != "off" for c in BACKEND_CALLS] == [aot_cache == "1"]


def test_a_failed_graph_is_not_cached_as_compiled(monkeypatch: pytest.MonkeyPatch, device: torch.device,
                                                  caught: list[warnings.WarningMessage], tmp_path: Path) -> None:
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))  # torch's AOTAutograd cache
    model, x = _model(device)
    with monkeypatch.context() as broken:
        _fail_lowering_of(broken, "backward")
        for _ in range(2):  # the second compile finds the forward cached, and its backward fails again
            torch._dynamo.reset()
            _train_step(torch.compile(model, backend="coil"), x)
    assert [s.graph_cache for s in COMPILED] == ["miss", "miss", "hit", "miss"]
    assert all(s.eager_fallback is not None for s in COMPILED)
    assert len(_coil_warnings(caught)) == 2
    assert [c.aot_cache for c in BACKEND_CALLS] == ["miss", "miss"]  # nothing stored the first time
    assert not [p for p in (tmp_path / "inductor" / "aotautograd").rglob("*") if p.is_file()]
    torch._dynamo.reset()
    _train_step(torch.compile(model, backend="coil"), x)  # fixed: compiles, nothing served as eager
    assert [(s.graph_cache, s.eager_fallback) for s in COMPILED[4:]] == [("hit", None), ("miss", None)]
    assert len(list((knobs.cache_dir / graph_cache.NAMESPACE).rglob("*.blob"))) == 2


def test_a_failed_inference_graph_is_not_stored_in_the_frontend_cache(
        monkeypatch: pytest.MonkeyPatch, device: torch.device, caught: list[warnings.WarningMessage]) -> None:
    monkeypatch.setenv("COIL_AOT_CACHE", "0")  # a hit in torch's cache would compile nothing
    monkeypatch.setitem(registry.LOWERINGS, aten.rsqrt.default, _broken)

    def norm(x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.layer_norm(x, x.shape[-1:]) * 2.0

    x = torch.randn(4, 32, device=device)
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(norm, backend="coil")(x), norm(x))
    call = BACKEND_CALLS[-1]
    assert call.frontend_cache == "miss" and call.eager_fallback is not None
    assert call.frontend_stored == "not stored: the Dynamo graph runs eagerly after a compile error"
    assert not list((knobs.cache_dir / frontend_cache.NAMESPACE).rglob("*.blob"))


def test_graph_compiled_directly_falls_back_alone(monkeypatch: pytest.MonkeyPatch, device: torch.device,
                                                  caught: list[warnings.WarningMessage]) -> None:
    monkeypatch.setitem(registry.LOWERINGS, aten.exp.default, _broken)

    def fn(x: torch.Tensor) -> tuple[torch.Tensor]:
        return (torch.exp(x) * 2.0,)

    x = torch.randn(16, device=device)
    gm = make_fx(fn, decomposition_table=decomposition_table(), tracing_mode="fake")(x)
    call = compile_graph(gm, [x], kind="inference")
    torch.testing.assert_close(call([x])[0], fn(x)[0])
    (message,) = _coil_warnings(caught)
    assert message.endswith("-- running this graph eagerly (set COIL_FALLBACK_ON_ERROR=0 to raise)")
    assert COMPILED[-1].eager_fallback is not None


def _fail_in_aot_autograd(monkeypatch: pytest.MonkeyPatch, error: type[Exception]) -> None:
    """AOTAutograd's tracing fails: coil's decomposition of rsqrt (layer norm's) raises `error`."""
    table = {**decomposition_table(), aten.rsqrt.default: _raising(error)}
    monkeypatch.setattr(backend_mod, "_decompositions", lambda: table)


@pytest.mark.parametrize("training", [False, True])
def test_a_graph_aot_autograd_fails_on_runs_eagers_ops(monkeypatch: pytest.MonkeyPatch, device: torch.device,
                                                       caught: list[warnings.WarningMessage], training: bool) -> None:
    monkeypatch.setenv("COIL_AOT_CACHE", "0")
    _fail_in_aot_autograd(monkeypatch, RuntimeError)
    model, x = _model(device)
    twin = copy.deepcopy(model)
    compiled = torch.compile(twin, backend="coil")
    with torch.set_grad_enabled(training):
        got, got_grads = _train_step(compiled, x) if training else (compiled(x), [])
        want, want_grads = _train_step(model, x) if training else (model(x), [])
        step: Callable[[torch.nn.Module], Any] = (lambda m: _train_step(m, x)) if training else (lambda m: m(x))
        eager_ops, fallback_ops = _ops(lambda: step(model)), _ops(lambda: step(compiled))
    torch.testing.assert_close(got, want)
    assert len(got_grads) == len(want_grads)
    for g, w in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(g, w)
    assert fallback_ops == eager_ops  # the Dynamo graph as captured: eager's ATen ops, one for one
    (message,) = _coil_warnings(caught)
    (stats,) = COMPILED
    assert stats.name.startswith("dynamo_") and stats.eager_fallback is not None
    assert f"coil failed in stage 'AOTAutograd' compiling {stats.name}: RuntimeError: injected failure" in message
    assert message.endswith(fallback_mod.WHOLE_GRAPH)
    assert BACKEND_CALLS[-1].eager_fallback == stats.eager_fallback


def test_aot_autograd_failure_raises_when_strict(monkeypatch: pytest.MonkeyPatch, device: torch.device) -> None:
    monkeypatch.setenv("COIL_AOT_CACHE", "0")
    _fail_in_aot_autograd(monkeypatch, RuntimeError)
    model, x = _model(device)
    with knobs.override(fallback_on_error=False), torch.no_grad(), pytest.raises(Exception, match="injected failure"):
        torch.compile(model, backend="coil")(x)
    assert not COMPILED


def test_an_error_dynamo_acts_on_is_not_a_fallback(monkeypatch: pytest.MonkeyPatch, device: torch.device,
                                                   caught: list[warnings.WarningMessage]) -> None:
    """IndexError reaches the user as eager would raise it (Dynamo's rule), not a silent eager run."""
    monkeypatch.setenv("COIL_AOT_CACHE", "0")
    _fail_in_aot_autograd(monkeypatch, IndexError)
    model, x = _model(device)
    with torch.no_grad(), pytest.raises(IndexError, match="injected failure"):
        torch.compile(model, backend="coil")(x)
    assert not COMPILED and not _coil_warnings(caught)


def _wrong_pre_grad_passes(raises: bool) -> Callable[..., torch.fx.GraphModule]:
    """Pre-grad passes that edit Dynamo's graph in place wrongly (every `+` a `-`), then raise or
    return it."""

    def passes(gm: torch.fx.GraphModule, *args: Any, **kwargs: Any) -> torch.fx.GraphModule:
        adds = [n for n in gm.graph.nodes if n.op == "call_function" and n.target in (operator.add, torch.add)]
        assert adds, "the model has residual adds"
        for n in adds:
            n.target = operator.sub
        gm.recompile()
        if raises:
            raise RuntimeError("injected failure")
        return gm

    return passes


def test_a_pre_grad_pass_that_fails_runs_the_graph_as_captured(
        monkeypatch: pytest.MonkeyPatch, device: torch.device, caught: list[warnings.WarningMessage]) -> None:
    monkeypatch.setenv("COIL_AOT_CACHE", "0")
    monkeypatch.setattr(backend_mod, "run_pre_grad_passes", _wrong_pre_grad_passes(raises=True))
    model, x = _model(device)
    with torch.no_grad():
        got = torch.compile(copy.deepcopy(model), backend="coil")(x)
        torch.testing.assert_close(got, model(x))
    (message,) = _coil_warnings(caught)
    (stats,) = COMPILED
    assert f"coil failed in stage 'pre-grad passes' compiling {stats.name}: RuntimeError: injected failure" in message


def test_a_fallback_after_a_wrong_pre_grad_pass_runs_the_graph_as_captured(
        monkeypatch: pytest.MonkeyPatch, device: torch.device, caught: list[warnings.WarningMessage]) -> None:
    """The passes edit Dynamo's graph in place; the fallback still runs what Dynamo captured."""
    monkeypatch.setenv("COIL_AOT_CACHE", "0")
    monkeypatch.setattr(backend_mod, "run_pre_grad_passes", _wrong_pre_grad_passes(raises=False))
    _fail_in_aot_autograd(monkeypatch, RuntimeError)
    model, x = _model(device)
    with torch.no_grad():
        got = torch.compile(copy.deepcopy(model), backend="coil")(x)
        torch.testing.assert_close(got, model(x))
    assert len(_coil_warnings(caught)) == 1 and COMPILED[-1].eager_fallback is not None
