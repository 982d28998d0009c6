"""The fx-passes verifier really runs after every pass inside backend compiles of this suite.

conftest.py sets COIL_VERIFY=1; these tests prove it takes effect through torch.compile: every
pass the managers run is followed by a verifier check naming it, and a deliberately broken
post-grad pass is caught inside the backend with an error naming the pass, node and invariant.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
from coil.backend import CoilCompileError
from coil.fx_passes import GraphPass, PassResult, Stage, knobs
from coil.fx_passes import manager as fx_manager
from coil.fx_passes import pipelines as fx_pipelines
from coil.knobs import knobs as backend_knobs
from torch import nn
from torch.fx import GraphModule


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).eval()


def test_verify_knob_is_on_in_the_integration_suite() -> None:
    assert knobs.verify, "tests-integration/conftest.py must set COIL_VERIFY=1"


@pytest.fixture
def log(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, str]]]:
    """('run', pass) for each pass the managers run, ('check', pass) for each verifier call."""
    events: list[tuple[str, str]] = []
    check, run_one = fx_manager.check_graph, fx_manager.PassManager._run_one

    def counted_check(gm: GraphModule, *, pass_name: str, **kw: Any) -> None:
        events.append(("check", pass_name))
        check(gm, pass_name=pass_name, **kw)

    def counted_run(self: Any, p: GraphPass, *args: Any) -> Any:
        events.append(("run", p.name))
        return run_one(self, p, *args)

    monkeypatch.setattr(fx_manager, "check_graph", counted_check)
    monkeypatch.setattr(fx_manager.PassManager, "_run_one", counted_run)
    yield events


def test_verifier_runs_after_every_pass_in_backend_compile(log: list[tuple[str, str]]) -> None:
    model, x = _model(), torch.randn(4, 8)
    with torch.no_grad(), backend_knobs.override(fallback_on_error=False):
        out = torch.compile(model, backend="coil")(x)
        torch.testing.assert_close(out, model(x), atol=1e-4, rtol=1e-4)
    runs = [name for kind, name in log if kind == "run"]
    assert "fuse_attention" in runs and "dead_code_elimination" in runs  # pre- and post-grad
    # each manager run checks its input, then every pass is checked right after it runs
    expected: list[tuple[str, str]] = []
    for kind, name in log:
        if kind == "run":
            expected += [("run", name), ("check", name)]
        elif name == "<input>":
            expected.append(("check", "<input>"))
    assert log == expected
    assert sum(1 for e in log if e == ("check", "<input>")) == 2  # pre-grad and post-grad


def _broken_meta(gm: GraphModule) -> PassResult:
    """Deliberately wrong: gives the first matmul's result the shape of a graph input."""
    first_input = next(n for n in gm.graph.nodes if n.op == "placeholder")
    wrong = first_input.meta["val"]
    for n in gm.graph.nodes:
        is_mm = n.op == "call_function" and "mm" in str(n.target)
        if is_mm and tuple(n.meta["val"].shape) != tuple(wrong.shape):
            n.meta["val"] = wrong
            return PassResult(gm, True)
    raise AssertionError("no matmul found to break")


def test_broken_pass_is_caught_inside_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    broken = GraphPass("broken_meta", _broken_meta, frozenset({Stage.POST_GRAD}))
    original = fx_pipelines.post_grad_passes

    def with_broken(*, is_backward: bool, reinplace: bool | None = None) -> tuple[GraphPass, ...]:
        return (*original(is_backward=is_backward, reinplace=False), broken)

    monkeypatch.setattr(fx_pipelines, "post_grad_passes", with_broken)
    model, x = _model(), torch.randn(4, 8)
    with (
        torch.no_grad(),
        backend_knobs.override(fallback_on_error=False),
        pytest.raises(Exception) as info,
    ):
        torch.compile(model, backend="coil")(x)
    chain: list[BaseException] = []
    e: BaseException | None = info.value
    while e is not None and e not in chain:  # Dynamo keeps the backend's error as inner_exception
        chain.append(e)
        e = e.__cause__ or getattr(e, "inner_exception", None) or e.__context__
    assert any(isinstance(c, CoilCompileError) for c in chain), chain
    violation = next(c for c in chain if type(c).__name__ == "InvariantViolation")
    assert violation.pass_name == "broken_meta"  # type: ignore[attr-defined]
    assert violation.invariant == "meta-val"  # type: ignore[attr-defined]
    assert "mm" in violation.node  # type: ignore[attr-defined]
