"""The five hand-picked model cases of `coil bench` (group "models"): HF GPT-2, BERT-base, a
Llama-style decoder, torchvision ResNet-50 and timm ViT-B/16.

Each is built from its config with random weights (seed 0) on the bench's device, with the
eager attention implementation and the batch sizes the suite has always measured (language
4 x 512 tokens, vision 32 x 3 x 224 x 224), so that their figures stay comparable from run to
run. The zoo (coil.bench.zoo_cases) measures models at the protocol's sizes.
"""

from __future__ import annotations

from typing import Any

from coil.bench import spec as _spec
from coil.bench.spec import Inputs, ModelSpec


def _ids(vocab: int, batch: int = 4, seq: int = 512) -> tuple[Any, ...]:
    import torch

    g = torch.Generator(device=_spec.DEVICE).manual_seed(1)
    return (torch.randint(0, vocab, (batch, seq), device=_spec.DEVICE, generator=g),)


def _images(batch: int = 32) -> tuple[Any, ...]:
    import torch

    g = torch.Generator(device=_spec.DEVICE).manual_seed(1)
    return (torch.randn(batch, 3, 224, 224, device=_spec.DEVICE, generator=g),)


def no_dropout(model: Any) -> None:
    """Dropout and stochastic depth off in `model` (every mode then computes one function)."""
    import torch

    for mod in model.modules():
        if isinstance(mod, torch.nn.Dropout):
            mod.p = 0.0
        if hasattr(mod, "drop_path") and hasattr(mod.drop_path, "drop_prob"):
            mod.drop_path.drop_prob = 0.0


def _built(model: Any) -> Any:
    m = model.to(_spec.DEVICE)
    no_dropout(m)
    return m


def _lm(build: Any) -> tuple[Any, Inputs]:
    import torch

    torch.manual_seed(0)
    m = _built(build())
    return m, _ids(m.config.vocab_size)


def _vision(build: Any) -> tuple[Any, Inputs]:
    import torch

    torch.manual_seed(0)
    return _built(build()), _images()


def _logits(model: Any, inputs: Inputs) -> Any:
    return _spec.call(model, inputs).logits


def _image_out(model: Any, inputs: Inputs) -> Any:
    return _spec.call(model, inputs)


def _lm_loss(model: Any, inputs: Inputs) -> Any:
    assert isinstance(inputs, tuple)
    return model(inputs[0], labels=inputs[0]).loss


def _image_loss(model: Any, inputs: Inputs) -> Any:
    import torch

    out = _spec.call(model, inputs)
    labels = torch.arange(out.shape[0], device=out.device) % out.shape[1]
    return torch.nn.functional.cross_entropy(out.float(), labels)


def _gpt2() -> Any:
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(GPT2Config(attn_implementation="eager"))  # type: ignore[call-arg]


def _bert() -> Any:
    from transformers import BertConfig, BertForMaskedLM

    return BertForMaskedLM(BertConfig(attn_implementation="eager"))  # type: ignore[call-arg]


def _llama() -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
                      num_attention_heads=16, num_key_value_heads=8, max_position_embeddings=1024,
                      attn_implementation="eager")  # type: ignore[call-arg]
    return LlamaForCausalLM(cfg)


def _resnet50() -> Any:
    import torchvision  # type: ignore[import-not-found, import-untyped, unused-ignore]

    return torchvision.models.resnet50()


def _vit() -> Any:
    import timm  # type: ignore[import-not-found, unused-ignore]

    return timm.create_model("vit_base_patch16_224", pretrained=False)


def _language(name: str, describe: str, build: Any, kind: str) -> ModelSpec:
    return ModelSpec(name, describe, lambda: _lm(build), _logits, _lm_loss, family=name, kind=kind)


def _image(name: str, describe: str, build: Any) -> ModelSpec:
    return ModelSpec(name, describe, lambda: _vision(build), _image_out, _image_loss, family=name, kind="vision")


SPECS: dict[str, ModelSpec] = {s.name: s for s in (
    _language("gpt2", "HF GPT2LMHeadModel(GPT2Config()), eager attention, batch 4 x 512", _gpt2, "decoder"),
    _language("bert_base", "HF BertForMaskedLM(BertConfig()), eager attention, batch 4 x 512", _bert, "encoder"),
    _language("llama_style", "HF LlamaForCausalLM: 8 layers, hidden 1024, 16 heads / 8 KV heads, "
              "SwiGLU 2816, vocab 32000, batch 4 x 512", _llama, "decoder"),
    _image("resnet50", "torchvision resnet50(), batch 32 x 3 x 224 x 224", _resnet50),
    _image("vit_b16", "timm vit_base_patch16_224, batch 32 x 3 x 224 x 224", _vit),
)}  # fmt: skip
