"""The model half of `coil bench`: HF GPT-2, BERT-base, a Llama-style decoder, ResNet-50, ViT-B/16.

Every model is built from its config with random weights (seed 0), on CUDA, and measured two ways:

* `<model>_infer_bf16`: the model in bf16, `eval()`, under `torch.no_grad()`;
* `<model>_train_amp`: one training step — `zero_grad`, forward and loss under
  `torch.autocast("cuda", torch.bfloat16)` with fp32 weights, backward (no optimizer). Dropout
  is set to 0 so that every mode computes the same function.

Accuracy follows the PyTorch benchmark harness's rule against an fp64 copy of the model run
without autocast: RMSE(mode) <= MULTIPLIER * RMSE(eager) + TOL / 10 for the output (inference)
or for the loss and every gradient (training), checked on call ACCURACY_CALL: a CUDA-graph
runner returns its eager warm-up from the first call and replays from the second (or third) on.

`first_call(case, mode)` builds a case's model and times its first step from `torch.compile` on;
coil.bench.model_runs measures a case in every mode, its first calls in new processes.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from coil.bench.measure import compile_mode

TOL = 1e-2
ACCURACY_CALL = 3
# what every mode's process imports before a first call is timed (`coil bench` runs every mode
# alike): coil's pipeline, and with it torch's Dynamo and part of Inductor's compiler
IMPORTED_BEFORE_THE_CLOCK = "coil.backend.pipeline.backend"
MULTIPLIER = 3.0


@dataclass(frozen=True)
class ModelSpec:
    """How to build one model and its inputs, and what its output and loss are."""

    name: str
    describe: str
    build: Callable[[], Any]  # -> nn.Module on CUDA, fp32, random weights
    inputs: Callable[[Any], tuple[Any, ...]]  # model -> positional inputs on CUDA
    output: Callable[[Any], Any]  # forward result -> the tensor compared for accuracy
    loss: Callable[[Any, tuple[Any, ...]], Any]  # (model, inputs) -> scalar loss


def _ids(vocab: int, batch: int = 4, seq: int = 512) -> tuple[Any, ...]:
    import torch

    g = torch.Generator(device="cuda").manual_seed(1)
    return (torch.randint(0, vocab, (batch, seq), device="cuda", generator=g),)


def _images(batch: int = 32) -> tuple[Any, ...]:
    import torch

    g = torch.Generator(device="cuda").manual_seed(1)
    return (torch.randn(batch, 3, 224, 224, device="cuda", generator=g),)


def _lm_loss(model: Any, inputs: tuple[Any, ...]) -> Any:
    return model(inputs[0], labels=inputs[0]).loss


def _image_loss(model: Any, inputs: tuple[Any, ...]) -> Any:
    import torch

    out = model(inputs[0])
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


SPECS: dict[str, ModelSpec] = {s.name: s for s in (
    ModelSpec("gpt2", "HF GPT2LMHeadModel(GPT2Config()), eager attention, batch 4 x 512", _gpt2,
              lambda m: _ids(m.config.vocab_size), lambda o: o.logits, _lm_loss),
    ModelSpec("bert_base", "HF BertForMaskedLM(BertConfig()), eager attention, batch 4 x 512", _bert,
              lambda m: _ids(m.config.vocab_size), lambda o: o.logits, _lm_loss),
    ModelSpec("llama_style", "HF LlamaForCausalLM: 8 layers, hidden 1024, 16 heads / 8 KV heads, "
              "SwiGLU 2816, vocab 32000, batch 4 x 512", _llama,
              lambda m: _ids(m.config.vocab_size), lambda o: o.logits, _lm_loss),
    ModelSpec("resnet50", "torchvision resnet50(), batch 32 x 3 x 224 x 224", _resnet50,
              lambda m: _images(), lambda o: o, _image_loss),
    ModelSpec("vit_b16", "timm vit_base_patch16_224, batch 32 x 3 x 224 x 224", _vit,
              lambda m: _images(), lambda o: o, _image_loss),
)}  # fmt: skip
MODEL_CASES = tuple(f"{n}_{k}" for n in SPECS for k in ("infer_bf16", "train_amp"))
# rough seconds a case takes (three modes, cold compiles, three warm-start processes per compiled
# mode): what `coil bench --budget-s` counts on to skip a case that would not finish
EST_S = {c: (150.0 if c.endswith("infer_bf16") else 240.0) for c in MODEL_CASES}


def _rmse(a: Any, ref: Any) -> float:
    """Root mean square error of `a` against `ref`, in fp64 on `ref`'s device (the host: the
    bench keeps its references there)."""
    import torch

    return float(torch.sqrt(torch.mean((a.detach().to(ref.device, torch.float64) - ref.double()) ** 2)))


def _no_dropout(model: Any) -> None:
    import torch

    for mod in model.modules():
        if isinstance(mod, torch.nn.Dropout):
            mod.p = 0.0
        if hasattr(mod, "drop_path") and hasattr(mod.drop_path, "drop_prob"):
            mod.drop_path.drop_prob = 0.0


def _model(spec: ModelSpec) -> Any:
    import torch

    torch.manual_seed(0)
    m = spec.build().to("cuda")
    _no_dropout(m)
    return m


def _as_model_dtype(model: Any, inputs: tuple[Any, ...]) -> tuple[Any, ...]:
    """Floating inputs (images) in the dtype of the model's weights (bf16, fp64 references)."""
    dtype = next(model.parameters()).dtype
    return tuple(x.to(dtype) if x.is_floating_point() else x for x in inputs)


def _infer_step(spec: ModelSpec, model: Any, inputs: tuple[Any, ...]) -> Any:
    import torch

    with torch.no_grad():
        return spec.output(model(*_as_model_dtype(model, inputs)))


def _train_step(spec: ModelSpec, model: Any, inputs: tuple[Any, ...], *, amp: bool = True) -> Any:
    import torch

    model.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        loss = spec.loss(model, _as_model_dtype(model, inputs))
    loss.backward()
    return loss.detach()


def _grads(model: Any) -> list[Any]:
    return [p.grad.detach().clone() for p in model.parameters() if p.grad is not None]


def first_call(case: str, mode: str) -> tuple[float, Callable[[], Any]]:
    """Seconds of the first call of `case` in `mode` in this process, and the step it ran (to
    call again). The clock runs from `torch.compile` to the end of the first step: Inductor
    imports its compiler inside `torch.compile`, coil imports what its pipeline does not during
    its first compile, and a user waits for both. What every mode's process has imported before
    (torch, Dynamo, sympy, the model's library, coil's pipeline: `IMPORTED_BEFORE_THE_CLOCK`) is
    not counted."""
    import torch

    spec, kind = _split(case)
    model = _model(spec)
    inputs = spec.inputs(model)
    if kind == "infer_bf16":
        model = model.to(torch.bfloat16).eval()
    seconds, step, _ = _compile_and_step(spec, kind, model, inputs, mode)
    return seconds, step


def _compile_and_step(spec: ModelSpec, kind: str, model: Any, inputs: tuple[Any, ...], mode: str
                      ) -> tuple[float, Callable[[], Any], Any]:
    """`model` compiled by `mode` and its first step: the seconds from `torch.compile` to the end
    of the step (synchronised), the step (to call again) and the step's result."""
    import torch

    torch.cuda.synchronize()
    t0 = time.perf_counter()
    f = compile_mode(model, mode)
    step = functools.partial(_infer_step if kind == "infer_bf16" else _train_step, spec, f, inputs)
    out = step()
    torch.cuda.synchronize()
    return time.perf_counter() - t0, step, out


def _split(case: str) -> tuple[ModelSpec, str]:
    for kind in ("infer_bf16", "train_amp"):
        if case.endswith("_" + kind):
            return SPECS[case[: -len(kind) - 1]], kind
    raise ValueError(f"not a model case: {case!r}")
