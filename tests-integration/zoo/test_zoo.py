"""The zoo's CPU twin: every coil.bench.zoo model at its "tiny" size, compiled with
backend="coil" on the CPU (Triton's interpreter), against eager PyTorch.

Two tests a model, in fp32 (bf16 is slow or missing on the CPU): inference (`eval()`, under
`no_grad`: the logits) and one training step (the zoo's loss and its backward: the loss, every
parameter's gradient and the buffers, batch-norm statistics included). Compile errors fall back
to eager as users get them (COIL_FALLBACK_ON_ERROR on), and the test fails if any coil graph ran
eagerly: the zoo checks that coil compiled every graph, not only that the numbers agree.
Models known to fail are strict xfails with their error (known_failures.py).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from check import close_scaled, no_eager_graphs
from coil.backend import COMPILED
from coil.bench import zoo
from coil.knobs import knobs

from .known_failures import KNOWN

CPU = torch.device("cpu")


def _params(step: str) -> list[Any]:
    """Every zoo model, the known failures of `step` marked strict xfail with their error."""
    return [pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=KNOWN[(name, step)]))
            if (name, step) in KNOWN else name for name in zoo.names()]


def _compiled(model: torch.nn.Module) -> Any:
    return torch.compile(model, backend="coil")


@pytest.mark.parametrize("name", _params("inference"))
def test_tiny_inference_matches_eager(name: str) -> None:
    model, inputs = zoo.build(name, "tiny", CPU, torch.float32)
    model.eval()
    twin = copy.deepcopy(model)
    with torch.no_grad():
        expected = zoo.forward(name, model, inputs)
        with knobs.override(fallback_on_error=True):
            got = zoo.forward(name, _compiled(twin), inputs)
    no_eager_graphs()
    close_scaled(got, expected, "logits")


@pytest.mark.parametrize("name", _params("training"))
def test_tiny_training_matches_eager(name: str) -> None:
    model, inputs = zoo.build(name, "tiny", CPU, torch.float32)
    twin = copy.deepcopy(model)
    expected = zoo.loss(name, model, inputs)
    expected.backward()
    with knobs.override(fallback_on_error=True):
        got = zoo.loss(name, _compiled(twin), inputs)
        got.backward()
    no_eager_graphs()
    assert any(s.name.startswith("backward") for s in COMPILED), [s.name for s in COMPILED]
    close_scaled(got, expected, "loss")
    for (pname, p), q in zip(twin.named_parameters(), model.parameters(), strict=True):
        assert (p.grad is None) == (q.grad is None), f"gradient of {pname}"
        if q.grad is not None:
            close_scaled(p.grad, q.grad, f"gradient of {pname}")
    for (bname, b), c in zip(twin.named_buffers(), model.buffers(), strict=True):
        close_scaled(b, c, f"buffer {bname}")
