"""GEMM templates end to end (COIL_MATMUL_TEMPLATES=always, and auto with timings made up):
torch.compile(backend="coil") runs every matrix product as a generated Triton kernel with its
pointwise epilogue fused in, no mm/addmm/bmm extern left, forward and training step matching
eager PyTorch (the Triton interpreter on the CPU; CUDA on the GPU)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from coil.backend import COMPILED, GraphStats
from coil.knobs import knobs

F = torch.nn.functional


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(24, 40)
        self.down = torch.nn.Linear(40, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(x)))


class Residual(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = torch.nn.Linear(24, 33)
        self.outer = torch.nn.Linear(33, 24, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.outer(torch.relu(self.inner(x)))


class Bmm(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(3, 20, 17))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.bmm(x, self.w) * 0.125


MODELS: dict[str, tuple[Callable[[], torch.nn.Module], tuple[int, ...]]] = {
    "mlp": (MLP, (2, 9, 24)),
    "residual": (Residual, (13, 24)),
    "bmm": (Bmm, (3, 11, 20)),
}


def _graphs(first: int) -> list[GraphStats]:
    graphs = COMPILED[first:]
    assert graphs and all(s.eager_fallback is None for s in graphs), [s.eager_fallback for s in graphs]
    return graphs


def _no_matmul_extern(graphs: list[GraphStats]) -> None:
    """Every graph ran its products as template kernels: no extern at all in these models, and no
    ATen matrix-product call in the wrapper."""
    for s in graphs:
        assert s.externs == 0, (s.name, s.externs)
        for op in ("aten.mm", "aten.addmm", "aten.bmm", "aten.baddbmm"):
            assert op not in s.wrapper_source, (s.name, op)
        assert any("matmul template" in src for src in s.kernel_sources.values()), s.name


@pytest.mark.parametrize("name", list(MODELS))
def test_forward_matches_eager_with_no_matmul_extern(device: torch.device, name: str) -> None:
    make, shape = MODELS[name]
    torch.manual_seed(0)
    model = make().to(device)
    x = torch.randn(*shape, device=device)
    first = len(COMPILED)
    with knobs.override(matmul_templates="always", fallback_on_error=False), torch.no_grad():
        got = torch.compile(model, backend="coil")(x)
        want = model(x)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    _no_matmul_extern(_graphs(first))


@pytest.mark.parametrize("name", list(MODELS))
def test_training_step_gradients_match_eager(device: torch.device, name: str) -> None:
    make, shape = MODELS[name]
    torch.manual_seed(0)
    model = make().to(device)
    x = torch.randn(*shape, device=device, requires_grad=True)

    def step(m: Any, inp: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        m.zero_grad(set_to_none=True)
        inp.grad = None
        loss = m(inp).pow(2).mean()
        loss.backward()
        assert inp.grad is not None
        return loss.detach(), [inp.grad.clone(), *[p.grad.clone() for p in m.parameters()]]  # type: ignore[union-attr]

    want_loss, want_grads = step(model, x)
    first = len(COMPILED)
    with knobs.override(matmul_templates="always", fallback_on_error=False):
        got_loss, got_grads = step(torch.compile(model, backend="coil"), x)
    torch.testing.assert_close(got_loss, want_loss, rtol=1e-4, atol=1e-6)
    for g, w in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
    graphs = _graphs(first)
    assert sorted(s.name.split("_")[0] for s in graphs) == ["backward", "forward"]
    _no_matmul_extern(graphs)


def test_off_keeps_the_externs(device: torch.device) -> None:
    torch.manual_seed(0)
    model = MLP().to(device)
    first = len(COMPILED)
    with knobs.override(matmul_templates="off", fallback_on_error=False), torch.no_grad():
        torch.compile(model, backend="coil")(torch.randn(2, 9, 24, device=device))
    assert sum(s.externs for s in _graphs(first)) == 2


def test_a_bad_value_is_an_error_naming_the_knob(device: torch.device) -> None:
    with knobs.override(matmul_templates="sometimes", fallback_on_error=False), \
            pytest.raises(Exception, match="COIL_MATMUL_TEMPLATES"):
        torch.compile(MLP().to(device), backend="coil")(torch.randn(2, 9, 24, device=device))


def _tuned_mlp_matches_eager(device: torch.device, **overrides: Any) -> None:
    """The MLP compiled with autotuning forced (and `overrides`) matches eager; the tuning memo
    is cleared before and after, so the (made-up) timings of the test are the ones used."""
    from coil.runtime import autotune

    autotune.clear_memo()
    torch.manual_seed(0)
    model = MLP().to(device)
    x = torch.randn(2, 9, 24, device=device)
    try:
        with knobs.override(autotune="always", fallback_on_error=False, **overrides), torch.no_grad():
            got = torch.compile(model, backend="coil")(x)
            want = model(x)
    finally:
        autotune.clear_memo()
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_template_tiles_are_autotuned(device: torch.device, monkeypatch: pytest.MonkeyPatch) -> None:
    """The autotuner times a template's configurations like any kernel's (`variants`): offered a
    16 x 16 tile beside the default and told it is faster, it keeps it, and the result still
    matches eager."""
    import importlib

    from coil.runtime import timing
    from coil.triton_codegen import MatmulConfig

    variants_mod = importlib.import_module("coil.triton_codegen.variants")  # (the package exports a function so named)
    small = MatmulConfig(16, 16, 16, 1, 4, 1)
    real = variants_mod.shape_configs
    monkeypatch.setattr(variants_mod, "shape_configs", lambda shape, target, hints=None: [
        *real(shape, target, hints)[:1], small])
    monkeypatch.setattr(timing, "measure", lambda kernel, grid, args: 0.5 if kernel.spec.constexprs.get(
        "BLOCK_M") == 16 else 1.0)
    first = len(COMPILED)
    _tuned_mlp_matches_eager(device, matmul_templates="always", autotune_min_bytes=0)
    (stats,) = _graphs(first)
    templates = {k: v for k, v in stats.autotune_choices.items() if k.endswith("_mm")}
    assert len(templates) == 2 and all("BLOCK_M=16" in v and "(default)" not in v for v in templates.values()), \
        stats.autotune_choices


@pytest.mark.parametrize("template_ms, extern_ms, externs", [(0.1, 1.0, 0), (5.0, 0.1, 2)])
def test_auto_takes_the_template_only_when_timed_faster(device: torch.device, monkeypatch: pytest.MonkeyPatch,
                                                        template_ms: float, extern_ms: float, externs: int) -> None:
    """COIL_MATMUL_TEMPLATES=auto times each template (its tiles) against its extern plus its
    epilogue kernel: told the template is faster it runs both products as templates, told the
    extern is, it keeps both ATen calls; either way the result matches eager."""
    from coil.runtime import timing

    monkeypatch.setattr(timing, "measure", lambda kernel, grid, args: template_ms if "BLOCK_M" in kernel.spec.constexprs
                        else 0.05)
    monkeypatch.setattr(timing, "measure_call", lambda fn, dev: (fn(), extern_ms)[1])  # the ATen call runs once
    first = len(COMPILED)
    _tuned_mlp_matches_eager(device, matmul_templates="auto")
    assert sum(s.externs for s in _graphs(first)) == externs


def test_auto_times_the_aten_call_on_real_tensors(device: torch.device, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ATen call a template competes with is timed for real: its operands and result are real
    tensors on the compile's device, made and run outside the compile's FakeTensorMode (under it
    the call is only traced, and its "time" the fake dispatch's whatever the product's size)."""
    from coil.runtime import timing
    from torch._subclasses.fake_tensor import is_fake
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    seen: list[tuple[bool, list[object]]] = []

    def measure_call(fn: Any, dev: torch.device) -> float:
        out = fn()
        seen.append((isinstance(out, torch.Tensor) and not is_fake(out) and out.device.type == dev.type,
                     _get_current_dispatch_mode_stack()))
        return 1.0

    monkeypatch.setattr(timing, "measure", lambda kernel, grid, args: 5.0)
    monkeypatch.setattr(timing, "measure_call", measure_call)
    _tuned_mlp_matches_eager(device, matmul_templates="auto")
    assert len(seen) == 2 and all(real and not modes for real, modes in seen), seen


def test_auto_takes_none_where_nothing_is_timed(device: torch.device) -> None:
    """Without autotuning (the interpreter's default) `auto` has no timings and keeps the externs."""
    torch.manual_seed(0)
    model = MLP().to(device)
    first = len(COMPILED)
    with knobs.override(matmul_templates="auto", autotune="0", fallback_on_error=False), torch.no_grad():
        torch.compile(model, backend="coil")(torch.randn(2, 9, 24, device=device))
    assert sum(s.externs for s in _graphs(first)) == 2
