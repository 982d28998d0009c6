"""The zoo's models as `coil bench` model cases (group "zoo"): every model of coil.bench.zoo at
its "real" size, as `zoo_<name>_infer_bf16`, `zoo_<name>_train_amp`, `zoo_<name>_train_accum` and
`zoo_<name>_train_opt` (coil.bench.steps).

The prefix keeps the zoo's cases apart from the five hand-picked ones where a zoo model has
the same name (gpt2, resnet50, vit_b16) but other sizes and attention. Each spec builds through
the zoo's contract: `zoo.build(name, "real", DEVICE, float32)` (seeded, dropout off, train
mode, keyword inputs), `zoo.forward` (the logits compared for accuracy) and `zoo.loss`; its
family and kind come from the zoo's entry.
"""

from __future__ import annotations

import functools
from typing import Any

from coil.bench import spec as _spec
from coil.bench import zoo
from coil.bench.spec import Inputs, ModelSpec

PREFIX = "zoo_"
STEPS = ("infer_bf16", "train_amp", "train_accum", "train_opt")


def _make(name: str) -> tuple[Any, Inputs]:
    import torch

    return zoo.build(name, "real", _spec.DEVICE, torch.float32)


def _spec_of(name: str) -> ModelSpec:
    e = zoo.entry(name)
    return ModelSpec(PREFIX + name, e.describe, functools.partial(_make, name),
                     functools.partial(zoo.forward, name), functools.partial(zoo.loss, name),
                     steps=STEPS, family=e.family, kind=e.kind, group="zoo")


@functools.cache
def zoo_specs() -> dict[str, ModelSpec]:
    """Every zoo model's spec, by case prefix (`zoo_<name>`), in the zoo's catalog order."""
    return {s.name: s for s in map(_spec_of, zoo.names())}
