"""`coil bench`'s `train_opt` step on the CPU: the training step of `train_amp` followed by an
AdamW step at learning rate 0. The oracles: `train_amp`'s own loss and gradients on a copy of
the model, the weights before the step (bitwise), and Adam's first moment after one step from
zero moments, (1 - beta1) x the gradient."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from coil.bench import spec as bench_spec
from coil.bench.spec import ModelSpec
from coil.bench.steps import OPT_LR, make_step, optimizer_of, prepare, reference


class _Mlp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(8, 16)
        self.b = torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.relu(self.a(x)))


def _spec() -> ModelSpec:
    def make() -> tuple[Any, Any]:
        torch.manual_seed(0)
        return _Mlp(), (torch.randn(32, 8),)

    return ModelSpec("mlp", "a tiny MLP", make, lambda m, x: m(*x), lambda m, x: m(*x).float().pow(2).mean(),
                     steps=("train_amp", "train_opt"), family="Tiny", kind="vision", group="zoo")


@pytest.fixture(autouse=True)
def _on_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench_spec, "DEVICE", "cpu")


def _weights(m: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in m.parameters()]


def test_prepare_makes_the_optimizer_state_and_moves_no_weight() -> None:
    spec = _spec()
    model, inputs = spec.make()
    before = _weights(model)
    prepared, _ = prepare(model, inputs, "train_opt")
    assert prepared is model
    opt = optimizer_of(model)
    assert opt.param_groups[0]["lr"] == OPT_LR == 0.0
    assert len(opt.state) == len(before)
    for p, w in zip(model.parameters(), before, strict=True):
        assert p.grad is None
        assert torch.equal(p, w)
        assert torch.count_nonzero(opt.state[p]["exp_avg"]) == 0 and float(opt.state[p]["step"]) == 1.0


def test_the_opt_step_is_the_training_step_then_an_adamw_step_that_keeps_the_weights() -> None:
    spec = _spec()
    model, inputs = spec.make()
    plain = copy.deepcopy(model)
    prepare(model, inputs, "train_opt")
    before = _weights(model)
    compiled = torch.compile(model, backend="eager")  # a compiled module's optimizer is its module's
    assert optimizer_of(compiled) is optimizer_of(model)
    step = make_step(spec, "train_opt", compiled, inputs)
    want = make_step(spec, "train_amp", plain, inputs)()
    want_grads = [p.grad.clone() for p in plain.parameters()]
    opt = optimizer_of(model)
    beta1 = opt.param_groups[0]["betas"][0]
    for call in range(3):
        loss = step()
        torch.testing.assert_close(loss, want)
        for p, g, w in zip(model.parameters(), want_grads, before, strict=True):
            torch.testing.assert_close(p.grad, g)
            assert torch.equal(p, w), "a learning rate of 0 moves no weight"
            assert float(opt.state[p]["step"]) == 2.0 + call
            if call == 0:  # zero moments before: the first moment is (1 - beta1) x the gradient
                torch.testing.assert_close(opt.state[p]["exp_avg"], (1 - beta1) * g)


def test_the_opt_steps_reference_is_the_training_steps() -> None:
    spec = _spec()
    model, inputs = spec.make()
    got = reference(spec, "train_opt", model, inputs)
    want = reference(spec, "train_amp", model, inputs)
    assert len(got) == len(want) == 1 + len(list(model.parameters()))
    assert all(g.dtype == torch.float64 for g in got[1:])  # the gradients, of the fp64 copy
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b)
