"""Compile a model with backend="coil" and compare forward and gradients with eager PyTorch (or, by
the benchmark harness's rule, with an fp64 reference); the checks the end-to-end tests share."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch
from coil.knobs import knobs


def run_both(model: torch.nn.Module, x: torch.Tensor, *, train: bool = True, atol: float = 1e-4,
             rtol: float = 1e-4) -> None:
    """Eager and compiled forward (and backward when `train`) must agree within atol/rtol."""
    torch.manual_seed(0)
    ref_model = model
    cmp_model = copy.deepcopy(model)
    x_ref = x.detach().clone().requires_grad_(train)
    x_cmp = x.detach().clone().requires_grad_(train)
    with knobs.override(fallback_on_error=False):
        compiled: Any = torch.compile(cmp_model, backend="coil")
        if train:
            out_cmp = compiled(x_cmp)
            out_cmp.square().sum().backward()
        else:
            with torch.no_grad():
                out_cmp = compiled(x_cmp)
    if train:
        out_ref = ref_model(x_ref)
        out_ref.square().sum().backward()
    else:
        with torch.no_grad():
            out_ref = ref_model(x_ref)
    torch.testing.assert_close(out_cmp, out_ref, atol=atol, rtol=rtol)
    if train:
        assert x_cmp.grad is not None and x_ref.grad is not None
        torch.testing.assert_close(x_cmp.grad, x_ref.grad, atol=atol, rtol=rtol)
        for (name, p_cmp), p_ref in zip(cmp_model.named_parameters(), ref_model.parameters(), strict=True):
            assert p_cmp.grad is not None, f"no gradient for {name}"
            torch.testing.assert_close(p_cmp.grad, p_ref.grad, atol=atol, rtol=rtol, msg=f"gradient of {name}")
    for b_cmp, b_ref in zip(cmp_model.buffers(), ref_model.buffers(), strict=True):
        torch.testing.assert_close(b_cmp, b_ref, atol=atol, rtol=rtol)


def compiled_anew(fn: Callable[..., Any], call: Callable[[Any], Any]) -> tuple[list[Any], Any]:
    """`call(torch.compile(fn, backend="coil"))` compiled from scratch (Dynamo reset; no graph,
    AOT or frontend cache, so each call schedules anew instead of loading an earlier compile's
    graph; a compile failure raises): the graphs it compiled (coil.backend.COMPILED entries) and
    what it returned."""
    from coil.backend import COMPILED

    first = len(COMPILED)
    torch._dynamo.reset()
    with knobs.override(fallback_on_error=False, graph_cache=False, aot_cache=False, frontend_cache=False):
        out = call(torch.compile(fn, backend="coil"))
    return list(COMPILED[first:]), out


def zoo_training_step_matches_eager(name: str, device: torch.device) -> list[str]:
    """One training step of zoo model `name` (tiny, fp32) compiled by coil (a compile failure
    raises) against eager from the same weights: every parameter's gradient must agree. Returns
    the lines of the wrappers coil generated for it that call SDPA."""
    from coil.backend import COMPILED
    from coil.bench import zoo

    torch.manual_seed(0)
    model, inputs = zoo.build(name, "tiny", str(device), torch.float32)
    compiled, _ = zoo.build(name, "tiny", str(device), torch.float32)
    compiled.load_state_dict(model.state_dict())
    first = len(COMPILED)
    zoo.loss(name, model, inputs).backward()
    with knobs.override(fallback_on_error=False):
        zoo.loss(name, torch.compile(compiled, backend="coil"), inputs).backward()
    for (n, a), b in zip(compiled.named_parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-5, msg=n)
    return [ln.strip() for s in COMPILED[first:] for ln in s.wrapper_source.splitlines() if "scaled_dot_product" in ln]


def no_eager_graphs() -> None:
    """Fail, with each error, if a coil graph ran eagerly after a compile error (or none compiled)."""
    from coil.backend import COMPILED

    assert COMPILED, "coil compiled no graph"
    eager = [f"{s.name}: {s.eager_fallback}" for s in COMPILED if s.eager_fallback is not None]
    assert not eager, "graphs ran eagerly after a compile error:\n" + "\n".join(eager)


def close_scaled(got: torch.Tensor, expected: torch.Tensor, what: str, atol: float = 1e-4, rtol: float = 1e-4) -> None:
    """Within `rtol`, and within `atol` times the largest magnitude of `expected` when over 1: the
    rounding error of a sum in fp32 grows with its terms, and gradients of a few tens (a ConvNet's
    first layers) carry errors of 1e-3 in eager itself, against fp64."""
    scale = float(expected.detach().abs().max()) if expected.is_floating_point() and expected.numel() else 1.0
    torch.testing.assert_close(got, expected, atol=atol * max(1.0, scale), rtol=rtol, msg=lambda m: f"{what}: {m}")


def within_harness_rule(got: torch.Tensor, eager: torch.Tensor, reference: torch.Tensor, what: str,
                        tol: float = 1e-4) -> None:
    """The PyTorch benchmark harness's accuracy rule against an fp64 `reference` (the one `coil
    bench` applies): RMSE(got) <= 3 x RMSE(eager) + tol / 10, so a model whose fp32 eager is
    itself far from fp64 (batch norm over two samples) is held to eager's own error, not to
    equality with eager."""
    from coil.bench.steps import MULTIPLIER, rmse

    err, allowed = rmse(got, reference), MULTIPLIER * rmse(eager, reference) + tol / 10
    assert err <= allowed, f"{what}: RMSE {err:.3g} against fp64, allowed {allowed:.3g} (eager's {rmse(eager, reference):.3g})"
