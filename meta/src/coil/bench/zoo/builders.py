"""Building a zoo entry: the model from its recipe, its example inputs, its output and its loss.

Everything imports torch and the model's library inside the function that needs it, so that
importing coil.bench.zoo stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from coil.bench.zoo.spec import HF, Entry, Recipe, Shape, Size, Timm

if TYPE_CHECKING:
    import torch

Inputs = dict[str, "torch.Tensor"]


def instantiate(recipe: Recipe) -> Any:
    """The model a recipe describes, with random weights (the caller seeds torch); dropout and
    stochastic depth off, in the config where the library reads them there."""
    if isinstance(recipe, HF):
        transformers = importlib.import_module("transformers")
        config = getattr(transformers, recipe.config)(**recipe.kwargs)
        for key, value in config.to_dict().items():
            if "drop" in key and isinstance(value, float):
                setattr(config, key, 0.0)
        return getattr(transformers, recipe.model)(config)
    if isinstance(recipe, Timm):
        timm = importlib.import_module("timm")
        return timm.create_model(recipe.name, pretrained=False, **recipe.kwargs)
    return recipe.make(importlib.import_module("torchvision.models"))


def no_dropout(model: Any) -> None:
    """Dropout and stochastic depth off in every module (p, drop_prob), so that training mode
    computes one function whatever runs it: eager, Inductor or coil."""
    for mod in model.modules():
        kind = type(mod).__name__
        if ("Drop" in kind or "Stochastic" in kind) and isinstance(getattr(mod, "p", None), float):
            mod.p = 0.0
        if isinstance(getattr(mod, "drop_prob", None), float):
            mod.drop_prob = 0.0


def make_inputs(entry: Entry, size: Size, model: Any, device: Any, dtype: Any) -> Inputs:
    """The example inputs of `entry` at `size` (seeded: the same on every device), keyword
    arguments of the model's forward: `input_ids` (+ `attention_mask` where sequences are padded,
    + `decoder_input_ids` for an encoder-decoder) or `pixel_values` (in `dtype`)."""
    import torch

    shape = entry.shape(size)
    g = torch.Generator().manual_seed(1)
    if entry.kind == "vision":
        x = torch.randn(shape.batch, 3, shape.image, shape.image, generator=g)
        return {"pixel_values": x.to(device=device, dtype=dtype)}
    vocab = int(model.config.vocab_size)
    ids = torch.randint(3, vocab, (shape.batch, shape.seq), generator=g)
    out: Inputs = {"input_ids": ids}
    if entry.kind in ("encoder", "encdec"):
        out["attention_mask"] = _padding_mask(shape)
        pad = model.config.pad_token_id
        ids.masked_fill_(out["attention_mask"] == 0, 0 if pad is None else int(pad))
    if entry.kind == "encdec":
        out["decoder_input_ids"] = torch.randint(3, vocab, (shape.batch, shape.target), generator=g)
    return {k: v.to(device) for k, v in out.items()}


def _padding_mask(shape: Shape) -> torch.Tensor:
    """Every odd row padded after three quarters of its tokens (1 = token, 0 = padding)."""
    import torch

    mask = torch.ones(shape.batch, shape.seq, dtype=torch.long)
    mask[1::2, (3 * shape.seq) // 4:] = 0
    return mask


def logits(entry: Entry, model: Any, inputs: Inputs) -> torch.Tensor:
    """The model's forward on `inputs`, reduced to the tensor the bench compares: the logits."""
    out = model(inputs["pixel_values"]) if entry.kind == "vision" else model(**inputs)
    return out.logits if hasattr(out, "logits") else out  # type: ignore[no-any-return]


def loss(entry: Entry, model: Any, inputs: Inputs) -> torch.Tensor:
    """A training step's loss, as users compute it.

    decoder: next-token cross entropy (transformers' `labels=input_ids`, shifted inside);
    encoder: masked-LM cross entropy against the input ids, padding ignored (-100);
    encdec: cross entropy of the decoder's logits against its next input ids (the last ignored);
    vision: cross entropy against labels `arange(batch) % classes`, in fp32.
    """
    import torch

    if entry.kind == "decoder":
        return model(**inputs, labels=inputs["input_ids"]).loss  # type: ignore[no-any-return]
    if entry.kind == "encoder":
        labels = inputs["input_ids"].masked_fill(inputs["attention_mask"] == 0, -100)
        return model(**inputs, labels=labels).loss  # type: ignore[no-any-return]
    if entry.kind == "encdec":
        target = inputs["decoder_input_ids"]
        labels = torch.cat([target[:, 1:], torch.full_like(target[:, :1], -100)], dim=1)
        return model(**inputs, labels=labels).loss  # type: ignore[no-any-return]
    out = logits(entry, model, inputs)
    labels = torch.arange(out.shape[0], device=out.device) % out.shape[1]
    return torch.nn.functional.cross_entropy(out.float(), labels)
