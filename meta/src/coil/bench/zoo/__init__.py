"""The model zoo: the models `coil bench` measures and the CPU twin compiles, built from their
configs with random weights (never downloaded).

The catalog is data (coil.bench.zoo.language, coil.bench.zoo.vision): one `Entry` per model with
its name, family, kind ("decoder", "encoder", "encdec", "vision"), a description of the real
model whose shapes it has and of what was capped, and a recipe (transformers config, timm
name, torchvision constructor) for each size:

* "real": as users run these models (the bench's size): decoder LLMs batch 8 x 1024 tokens,
  encoders 16 x 512, encoder-decoders 8 x 512 source / 128 target tokens, vision 64 x 3 x 224 x
  224; LLMs of realistic width with their layers capped so that one fits a few GB;
* "tiny": the same architecture at hidden 64, 2 layers, 2-4 heads (special features kept:
  sliding window, GQA, rotary, relative bias, depthwise convs, layer scale), batch 2 of 32 tokens
  (16 target tokens) or images of 32 x 32 (64 x 64 for Swin and the batch-norm ConvNets
  whose last maps would be 1 x 1): for the Triton interpreter.

Models use their library's default attention implementation (transformers' sdpa); nothing sets
`attn_implementation`.

The contract the bench runner uses:

* `names()` -> every model's name, in catalog order (decoders, encoders, encoder-decoders,
  vision).
* `entry(name)` -> its `Entry` (family, kind, describe).
* `build(name, size, device, dtype)` -> `(model, inputs)`: the model seeded (`torch.manual_seed(0)`),
  dropout and stochastic depth off (every mode computes the same function), in train mode, on
  `device` with its floating parameters and buffers in `dtype`; `inputs` a dict of keyword
  tensors (seeded, the same on every device): `input_ids` (int64), for encoders and
  encoder-decoders an `attention_mask` whose odd rows are padded after 3/4 of their tokens, for
  encoder-decoders `decoder_input_ids`, for vision `pixel_values` in `dtype`. Inference: call
  `model.eval()` and run under `torch.no_grad()`.
* `forward(name, model, inputs)` -> the logits tensor (what accuracy is judged on).
* `loss(name, model, inputs)` -> a scalar training loss (next-token, masked-LM, seq2seq or
  image-class cross entropy; see coil.bench.zoo.builders.loss); a training step is
  `loss(...).backward()`, under autocast for mixed precision.

Importing this package imports neither torch nor any model library.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from coil.bench.zoo import builders as _build
from coil.bench.zoo.builders import Inputs
from coil.bench.zoo.language import ENTRIES as _LANGUAGE
from coil.bench.zoo.spec import (
    HF,
    KINDS,
    SHAPES,
    SIZES,
    Entry,
    Kind,
    Recipe,
    Shape,
    Size,
    Timm,
    Torchvision,
)
from coil.bench.zoo.vision import ENTRIES as _VISION

if TYPE_CHECKING:
    import torch

__all__ = [
    "HF", "KINDS", "SHAPES", "SIZES", "Entry", "Inputs", "Kind", "Recipe", "Shape", "Size", "Timm",
    "Torchvision", "build", "entry", "forward", "loss", "names",
]  # fmt: skip

CATALOG: dict[str, Entry] = {e.name: e for e in (*_LANGUAGE, *_VISION)}


def names() -> list[str]:
    """Every model of the zoo, in catalog order."""
    return list(CATALOG)


def entry(name: str) -> Entry:
    """The catalog entry of `name`; KeyError naming the known models otherwise."""
    try:
        return CATALOG[name]
    except KeyError:
        raise KeyError(f"no zoo model {name!r}; known: {', '.join(CATALOG)}") from None


def build(name: str, size: Size, device: Any, dtype: Any) -> tuple[Any, Inputs]:
    """`name` at `size` ("real" or "tiny") on `device` in `dtype`: (model, inputs); see the
    module docstring for what both are."""
    import torch

    e = entry(name)
    if size not in SIZES:
        raise ValueError(f"size must be one of {SIZES}, not {size!r}")
    torch.manual_seed(0)
    model = _build.instantiate(e.recipe(size))
    _build.no_dropout(model)
    model = model.to(device=device, dtype=dtype).train()
    return model, _build.make_inputs(e, size, model, device, dtype)


def forward(name: str, model: Any, inputs: Inputs) -> torch.Tensor:
    """`model`'s logits on `inputs` (a built model of `name`, or its compiled form)."""
    return _build.logits(entry(name), model, inputs)


def loss(name: str, model: Any, inputs: Inputs) -> torch.Tensor:
    """The scalar loss of one training step of `model` (of `name`) on `inputs`."""
    return _build.loss(entry(name), model, inputs)
