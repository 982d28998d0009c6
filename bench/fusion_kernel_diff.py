"""The kernels coil makes for the bench's models, compiled on the CPU without running them (session 22).

    python bench/fusion_kernel_diff.py [--out FILE]

For a change to fusion: run it with two coil trees (PYTHONPATH) and diff the outputs to see
which models' kernels change. Each model (the bench's GPT-2, BERT and Llama-style configurations
cut to 2 layers, torchvision ResNet-50, timm ViT-B/16 cut to 2 blocks; random weights, fp32,
batch 2, 64 tokens or 64 x 64 images) runs one training step (forward, loss, backward) through
torch.compile(backend="coil"); kernels are generated for the "cuda" target and captured at
coil.runtime's compile_kernels, where the graph then falls back to eager, so nothing runs in
Triton's interpreter. Prints, per model and graph, the number of kernels and their names (the
FX ops each fuses).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

import torch


def _models() -> dict[str, tuple[Any, Any]]:
    import timm
    import torchvision
    import transformers as T

    ids = torch.randint(0, 1000, (2, 64))
    img = torch.randn(2, 3, 64, 64)
    llama = T.LlamaConfig(vocab_size=32000, hidden_size=256, intermediate_size=704, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, attn_implementation="eager")
    return {
        "gpt2": (T.GPT2LMHeadModel(T.GPT2Config(n_layer=2, attn_implementation="eager")), ids),
        "bert": (T.BertForMaskedLM(T.BertConfig(num_hidden_layers=2, attn_implementation="eager")), ids),
        "llama_style": (T.LlamaForCausalLM(llama), ids),
        "resnet50": (torchvision.models.resnet50(), img),
        "vit_b16": (timm.create_model("vit_base_patch16_224", pretrained=False, depth=2, img_size=64), img),
    }


def capture_kernels(seen: Callable[[list[Any]], None]) -> None:
    """From now on coil generates every graph's kernels for the "cuda" target and hands their
    KernelSpecs to `seen` instead of compiling them; the graph then fails to compile and runs
    eagerly (coil's fallback), so nothing runs in Triton's interpreter."""
    import coil.backend.compile as bc
    import coil.runtime.compile as rc

    def spy(specs: Any, device: Any) -> Any:
        seen(list(specs))
        raise RuntimeError("kernels captured (bench: capture_kernels)")

    generate = bc.generate_schedule
    bc.generate_schedule = lambda sched, bufs, target, *x, **k: generate(sched, bufs, "cuda", *x, **k)
    real = rc.compile_kernels
    for module in list(sys.modules.values()):
        if getattr(module, "compile_kernels", None) is real:
            module.compile_kernels = spy


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    graphs: list[list[str]] = []
    capture_kernels(lambda specs: graphs.append([s.name for s in specs]))
    lines = []
    for name, (model, x) in _models().items():
        torch.manual_seed(0)
        graphs.clear()
        torch._dynamo.reset()
        out = torch.compile(model, backend="coil")(x, labels=x) if x.dtype == torch.int64 else \
            torch.compile(model, backend="coil")(x)
        loss = out.loss if hasattr(out, "loss") else out.float().square().mean()
        loss.backward()
        lines.append(f"== {name}: {len(graphs)} graphs, {sum(map(len, graphs))} kernels")
        for i, g in enumerate(graphs):
            lines.append(f"  graph {i}: {len(g)} kernels")
            lines.extend(f"    {k}" for k in g)
    text = "\n".join(lines)
    print("\n".join(ln for ln in lines if ln.startswith("==") or ln.startswith("  graph")))
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
