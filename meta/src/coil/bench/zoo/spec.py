"""What one zoo entry is: a model's name, family and kind, and how to build it at each size.

A recipe is data: which library builds the model and from which configuration. Nothing here
imports torch or a model library; coil.bench.zoo.builders does, when a model is built.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Kind = Literal["decoder", "encoder", "encdec", "vision"]
Size = Literal["real", "tiny"]
KINDS: tuple[Kind, ...] = ("decoder", "encoder", "encdec", "vision")
SIZES: tuple[Size, ...] = ("real", "tiny")


@dataclass(frozen=True)
class HF:
    """A transformers model from its config: `transformers.<model>(transformers.<config>(**kwargs))`."""

    model: str
    config: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Timm:
    """A timm model, never pretrained: `timm.create_model(name, pretrained=False, **kwargs)`
    (timm's kwargs override the named architecture's: depth, width, image size...)."""

    name: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Torchvision:
    """A torchvision model, never pretrained: `make(torchvision.models)` (torchvision's named
    constructors take no depth or width, so a reduced config names its blocks itself)."""

    make: Callable[[Any], Any]


Recipe = HF | Timm | Torchvision


@dataclass(frozen=True)
class Shape:
    """The example inputs of one kind at one size: `batch` rows of `seq` tokens (the source for
    an encoder-decoder, which also gets `target` decoder tokens), or `batch` images of 3 x
    `image` x `image`."""

    batch: int
    seq: int = 0
    target: int = 0
    image: int = 0


# The sizes the bench measures ("real": as users run these models) and the CPU twin compiles
# ("tiny": the same architecture, small enough for the Triton interpreter).
SHAPES: dict[tuple[Kind, Size], Shape] = {
    ("decoder", "real"): Shape(8, seq=1024),
    ("encoder", "real"): Shape(16, seq=512),
    ("encdec", "real"): Shape(8, seq=512, target=128),
    ("vision", "real"): Shape(64, image=224),
    ("decoder", "tiny"): Shape(2, seq=32),
    ("encoder", "tiny"): Shape(2, seq=32),
    ("encdec", "tiny"): Shape(2, seq=32, target=16),
    ("vision", "tiny"): Shape(2, image=32),
}


@dataclass(frozen=True)
class Entry:
    """One model of the zoo.

    `describe` names the real model whose shapes the "real" recipe has and says what was capped
    (layers, width, vocabulary) so that one model fits a few GB; the "tiny" recipe is the same
    architecture with its special features kept (sliding window, GQA, rotary, relative bias,
    depthwise convs, layer scale). `tiny_image` overrides the tiny image side where the model
    needs a larger one (windows that must still shift, batch norm that must see more than two
    values).
    """

    name: str
    family: str
    kind: Kind
    describe: str
    real: Recipe
    tiny: Recipe
    tiny_image: int | None = None

    def recipe(self, size: Size) -> Recipe:
        return self.real if size == "real" else self.tiny

    def shape(self, size: Size) -> Shape:
        shape = SHAPES[(self.kind, size)]
        if size == "tiny" and self.tiny_image is not None:
            return Shape(shape.batch, image=self.tiny_image)
        return shape
