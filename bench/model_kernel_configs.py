"""The kernels coil makes for a bench model's training step at the bench's sizes, on the CPU, with
their strategies, sizes and launch configurations; optionally compiled offline for a GPU.

    python bench/model_kernel_configs.py [--model gpt2|bert|llama_style] [--layers 1]
                                         [--reductions-only] [--compile-for 90]

The model is the bench's HF configuration (full width, `--layers` layers, random weights) on the
bench's batch, 4 x 512 tokens, one AMP (bf16 autocast) training step through
torch.compile(backend="coil") on the CPU. Kernels are generated for the "cuda" target and
captured at coil.runtime's compile_kernels, where the graph then falls back to eager (nothing runs
in Triton's interpreter). One line per kernel: name, strategy, xnumel, rnumel, constexprs, warps.
Run it with two coil trees on PYTHONPATH and diff the outputs to see which kernels a change of a
rule touches (session 31: the outer-tiling changes on GPT-2).

`--compile-for CC` also compiles every kernel with Triton for CUDA compute capability CC (e.g.
90, the H100/H200) without a GPU (`triton.compile` of an ASTSource with the kernel's argument
types) and prints ok or the error: a kernel that would not compile on the device shows up here.
Block sizes are those the rule chose (autotuning needs a GPU).
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any

import torch

_TRITON_TYPES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16", torch.float64: "fp64",
                 torch.int64: "i64", torch.int32: "i32", torch.int16: "i16", torch.int8: "i8", torch.uint8: "u8",
                 torch.bool: "i1"}


def _model(name: str, layers: int) -> Any:
    import transformers as T

    if name == "gpt2":
        return T.GPT2LMHeadModel(T.GPT2Config(n_layer=layers, attn_implementation="eager"))
    if name == "bert":
        return T.BertForMaskedLM(T.BertConfig(num_hidden_layers=layers, attn_implementation="eager"))
    if name == "llama_style":
        cfg = T.LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=layers,
                            num_attention_heads=16, num_key_value_heads=8, max_position_embeddings=1024,
                            attn_implementation="eager")
        return T.LlamaForCausalLM(cfg)
    raise SystemExit(f"unknown model {name!r}: gpt2, bert or llama_style")


def _compile(spec: Any, cc: int) -> str:
    """"ok" or the error of compiling `spec` (a coil.runtime KernelSpec) for compute capability cc."""
    import triton
    from kernel_variants_probe import _load
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fn = _load(spec.source, spec.name)
    positional = [n for n in fn.arg_names if n not in spec.constexprs]
    signature: dict[str, str] = {}
    for name, arg in zip(positional, spec.args, strict=True):
        signature[name] = f"*{_TRITON_TYPES[arg.dtype]}" if hasattr(arg, "dtype") else \
            ("i64" if abs(int(arg)) >= 2 ** 31 else "i32")
    signature.update({n: "constexpr" for n in spec.constexprs})
    try:
        triton.compile(ASTSource(fn, signature=signature, constexprs=dict(spec.constexprs)),
                       target=GPUTarget("cuda", cc, 32), options={"num_warps": spec.num_warps,
                                                                   "num_stages": spec.num_stages})
    except Exception as exc:  # reported per kernel: the point of the check
        return f"FAILED {type(exc).__name__}: {str(exc)[:300]}"
    return "ok"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="gpt2")
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--reductions-only", action="store_true")
    ap.add_argument("--compile-for", type=int, default=None, metavar="CC")
    a = ap.parse_args()
    from fusion_kernel_diff import capture_kernels

    graphs: list[list[str]] = []

    def seen(specs: list[Any]) -> None:
        lines = []
        for s in specs:
            m = re.search(r"# kernel (\w+): (\w+)", s.source)
            strategy = m.group(2) if m else "?"
            if a.reductions_only and strategy in ("pointwise", "?"):
                continue
            xn, rn = (re.search(rf"{v} = (\d+)", s.source) for v in ("xnumel", "rnumel"))
            line = (f"{s.name:56s} {strategy:10s} x={xn.group(1) if xn else '-':>9s} r={rn.group(1) if rn else '-':>6s} "
                    f"{dict(s.constexprs)} w{s.num_warps}")
            if a.compile_for is not None:
                line += "  " + _compile(s, a.compile_for)
            lines.append(line)
        graphs.append(lines)

    capture_kernels(seen)
    torch.manual_seed(0)
    model = _model(a.model, a.layers)
    ids = torch.randint(0, 1000, (4, 512))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = torch.compile(model, backend="coil")(ids, labels=ids)
    out.loss.backward()
    for i, lines in enumerate(graphs):
        print(f"== graph {i}: {len(lines)} kernels")
        print("\n".join(f"  {ln}" for ln in lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
