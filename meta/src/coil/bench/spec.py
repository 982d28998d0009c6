"""What a model case of `coil bench` is built from: a `ModelSpec`.

A spec says how to build one model and its example inputs, which tensor of its forward is
judged for accuracy, and what a training step's loss is. Every model case is a spec and a step
kind (coil.bench.steps): `<spec name>_<step>`, e.g. `gpt2_train_amp`, `zoo_llama_infer_bf16`.

Inputs are positional (a tuple) or keyword (a dict) arguments of the model's forward;
`spec.output(model, inputs)` and `spec.loss(model, inputs)` call the model themselves, so the
model passed in may be the module or its compiled form.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Inputs = tuple[Any, ...] | dict[str, Any]

# the device every model case runs on (tests of the harness's plumbing run it on "cpu")
DEVICE = "cuda"


@dataclass(frozen=True)
class ModelSpec:
    """One model of `coil bench`.

    `make()` builds it: `(model, inputs)`, the model seeded, in fp32 on DEVICE, in train mode
    with dropout and stochastic depth off (every mode computes the same function), the inputs
    seeded too. `output(model, inputs)` runs the forward and returns the tensor compared for
    accuracy (the logits); `loss(model, inputs)` returns a training step's scalar loss.
    `steps` are the step kinds (coil.bench.steps.STEPS) the suite measures it in; `family` and
    `kind` (decoder, encoder, encdec, vision) select it by group; `group` is the suite it
    belongs to ("models": the five hand-picked cases, "zoo": coil.bench.zoo's catalog)."""

    name: str
    describe: str
    make: Callable[[], tuple[Any, Inputs]]
    output: Callable[[Any, Inputs], Any]
    loss: Callable[[Any, Inputs], Any]
    steps: tuple[str, ...] = ("infer_bf16", "train_amp")
    family: str = ""
    kind: str = ""
    group: str = "models"


def cast_inputs(inputs: Inputs, dtype: Any) -> Inputs:
    """`inputs` with every floating tensor (images) in `dtype`; integer ids and masks unchanged."""
    def one(x: Any) -> Any:
        return x.to(dtype) if getattr(x, "is_floating_point", lambda: False)() else x

    if isinstance(inputs, dict):
        return {k: one(v) for k, v in inputs.items()}
    return tuple(one(x) for x in inputs)


def call(model: Any, inputs: Inputs) -> Any:
    """`model(*inputs)` or `model(**inputs)`."""
    return model(**inputs) if isinstance(inputs, dict) else model(*inputs)
