"""How many kernels coil makes for a zoo model's step, counted on the CPU on fake CUDA tensors.

    python bench/kernel_census.py MODEL [--step train|infer] [--size real|tiny] [--top N]

A host-bound step without CUDA graphs pays for every launch, so the kernels a graph is cut into
matter beside their speed; this counts them without a GPU. MODEL is a zoo model
(`coil.bench.zoo`, e.g. swin_t, gpt2); its library must be importable (timm for the timm
models). Its step is traced whole by AOTAutograd with coil's decompositions and partitioner on
fake CPU tensors (the model is built on the meta device, its weights not initialised, unless
its constructor computes on tensors: then on the CPU): `train`, the zoo's loss under bf16
autocast and its backward (a forward and a backward graph);
`infer`, the model in bf16 under `no_grad` (one graph). Each graph is traced again on fake CUDA
tensors and run through coil's post-grad passes, lowering, scheduling, Triton codegen for CUDA
and wrapper codegen. Prints, per graph: its kernels and externs, the kernels by kind (the
kernel's name without its number: the ops fused into it) and the externs by op; then the total.
Knobs apply as in a compile: `COIL_PAD_MM=0 python bench/kernel_census.py swin_t` counts
without the matmul padding.

As in a compile, the forward's saved tensors may change layout (channels-last activations) and
the backward adopts the layouts the forward's passes gave them. What differs from a compile on
the GPU: no Dynamo (no graph breaks) and so no pre-grad passes, CPU autocast's casts in place of
CUDA's, the split rule of an H200 (132 SMs), no matmul templates, no autotuning, no
memory-planner ordering. docs/perf.md ("Model zoo") compares its counts with the GPU's.
"""

from __future__ import annotations

import argparse
import collections
import copy
import functools
import re
import sys
from typing import Any

import torch
from coil.backend.pipeline.partition import partition
from coil.bench import zoo
from coil.bench.zoo import builders
from coil.fx_passes import GRAPH_KIND, adopt_input_strides, run_post_grad_passes
from coil.fx_passes.passes.channels_last import FREE_OUTPUTS
from coil.knobs import knobs
from coil.lowering_ir import decomposition_table, lower
from coil.lowering_ir.split_rule import SplitRule
from coil.scheduler import schedule
from coil.triton_codegen import OUTER_XBLOCK, CodegenOptions, generate_schedule
from coil.wrapper_codegen import KernelLaunch, build
from functorch.compile import make_boxed_func
from torch._functorch.aot_autograd import aot_function
from torch._subclasses.fake_tensor import FakeTensorMode, unset_fake_temporarily
from torch.func import functional_call
from torch.fx.experimental.proxy_tensor import make_fx

H200_SMS = 132


def census(gm: torch.fx.GraphModule, kind: str, saved: list[torch.Tensor]) -> dict[str, Any]:
    """`gm` (a graph AOTAutograd traced on the CPU) on fake CUDA tensors through coil's pipeline
    up to wrapper codegen: its kernels and externs, counted by kind. A forward fills `saved` with
    what it returns for the backward, laid out as its passes left them; a backward's leading
    inputs adopt those layouts, as a compile's backward adopts the strides its forward reported."""
    with unset_fake_temporarily():
        with FakeTensorMode(allow_non_fake_inputs=True):
            inputs = [torch.empty_strided(n.meta["val"].shape, n.meta["val"].stride(), dtype=n.meta["val"].dtype,
                                          device="cuda")
                      for n in gm.graph.nodes if n.op == "placeholder"]
        cuda = copy.deepcopy(gm)
        for n in cuda.graph.nodes:  # constants the trace made on the CPU go where the graph runs
            if str(n.kwargs.get("device", "")) == "cpu":
                n.kwargs = {**n.kwargs, "device": torch.device("cuda", 0)}
        cuda.recompile()
        g = make_fx(cuda, tracing_mode="fake")(*inputs)
        g.meta[GRAPH_KIND] = kind
        loss = _loss_position(g) if kind == "forward" else -1  # the passes keep the outputs' order
        if kind == "forward":  # the buffers' updates (batch norm's statistics), the loss, the saved
            g.meta[FREE_OUTPUTS] = tuple(range(loss + 1, len(_outputs(g))))
        elif kind == "backward" and saved:  # its inputs: what the forward saved, then the loss's gradient
            adopt_input_strides(g, saved + inputs[len(saved):])
        g = run_post_grad_passes(g, is_backward=kind == "backward")
        if kind == "forward":
            saved[:] = [o.meta["val"] for o in _outputs(g)[loss + 1:]]
        lowered = lower(g, kind, split=SplitRule(H200_SMS, OUTER_XBLOCK))
        sched = schedule(lowered, fusion=knobs.fusion, visit_order=knobs.fusion_visit_order, order_time_limit=0)
        sources = generate_schedule(sched, lowered.buffers(), "cuda", knobs.reduction_strategy, lowered.symbol_hints,
                                    CodegenOptions())
        build(sched, {s.name: KernelLaunch(s.name, s.pointer_args, s.size_args, s.grid) for s in sources},
              reuse=knobs.reuse)  # the wrapper is built, as a compile builds it
    return {"kernels": collections.Counter(re.sub(r"^kernel\d+_", "", s.name) for s in sources),
            "externs": collections.Counter(str(e.kernel) for e in sched.externs())}


def _outputs(g: torch.fx.GraphModule) -> list[Any]:
    return list(next(n for n in reversed(g.graph.nodes) if n.op == "output").args[0])


def _loss_position(g: torch.fx.GraphModule) -> int:
    """Where a training forward returns the loss (its one 0-d floating output): after the
    updates of the buffers the step mutates, before the tensors saved for the backward."""
    for i, o in enumerate(_outputs(g)):
        v = o.meta.get("val") if isinstance(o, torch.fx.Node) else None
        if isinstance(v, torch.Tensor) and v.dim() == 0 and v.is_floating_point():
            return i
    raise ValueError("kernel census: the forward returns no loss (no 0-d floating output)")


def trace(model_name: str, step: str, size: str) -> list[tuple[str, dict[str, Any]]]:
    """The census of every graph of `model_name`'s `step` at `size`, in the order traced."""
    entry = zoo.entry(model_name)
    dtype = torch.float32 if step == "train" else torch.bfloat16
    try:
        with torch.device("meta"):
            model = builders.instantiate(entry.recipe(size))  # type: ignore[arg-type]
    except NotImplementedError:  # its constructor reads tensors it computes (torchvision's RegNet widths)
        model = builders.instantiate(entry.recipe(size))  # type: ignore[arg-type]
    builders.no_dropout(model)
    model.train(step == "train")
    found: list[tuple[str, dict[str, Any]]] = []
    saved: list[torch.Tensor] = []  # the forward's saved tensors, as its passes laid them out

    def compiler(kind: str) -> Any:
        def compile_(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
            found.append((kind, census(gm, kind, saved)))
            return make_boxed_func(functools.partial(_empty_outputs, gm))
        return compile_

    model = model.to_empty(device="cpu").to(dtype)  # allocated, not initialised (no random init)
    inputs = builders.make_inputs(entry, size, model, "cpu", dtype)  # type: ignore[arg-type]
    params = dict(model.named_parameters())
    buffers = dict(model.named_buffers())
    names = list(params) + list(buffers)

    def run(*args: torch.Tensor) -> tuple[torch.Tensor]:
        call = _Call(model, dict(zip(names, args[:len(names)], strict=True)))
        given = dict(zip(inputs, args[len(names):], strict=True))
        if step == "infer":
            return (builders.logits(entry, call, given),)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return (builders.loss(entry, call, given),)

    compiled = aot_function(run, fw_compiler=compiler("forward" if step == "train" else "inference"),
                            bw_compiler=compiler("backward"), decompositions=decomposition_table(),
                            partition_fn=partition)
    args = [*params.values(), *buffers.values(), *inputs.values()]
    # the model's Python runs as under Dynamo, where libraries skip their data-dependent checks
    # (transformers' mask preparation asks torch.compiler.is_compiling())
    compiling, torch.compiler.is_compiling = torch.compiler.is_compiling, lambda: True
    try:
        if step == "train":
            compiled(*args)[0].backward()
        else:
            with torch.no_grad():
                compiled(*args)
    finally:
        torch.compiler.is_compiling = compiling
    return found


def _empty_outputs(gm: torch.fx.GraphModule, *args: Any) -> list[Any]:
    """What `gm` returns, as empty tensors of its outputs' shapes and strides: the census runs
    no arithmetic (AOTAutograd calls the forward to reach the backward)."""
    return [torch.empty_strided(o.meta["val"].shape, o.meta["val"].stride(), dtype=o.meta["val"].dtype)
            if isinstance(o, torch.fx.Node) and isinstance(o.meta.get("val"), torch.Tensor) else None
            for o in _outputs(gm)]


class _Call:
    """`model` called with its parameters and buffers replaced by `state` (torch.func)."""

    def __init__(self, model: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
        self.model, self.state = model, state

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return functional_call(self.model, self.state, args, kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python bench/kernel_census.py", description=__doc__.split("\n")[0])
    parser.add_argument("model", choices=zoo.names())
    parser.add_argument("--step", choices=("train", "infer"), default="train")
    parser.add_argument("--size", choices=("real", "tiny"), default="real")
    parser.add_argument("--top", type=int, default=20, help="kinds of kernels and externs listed a graph")
    args = parser.parse_args(argv)
    total_k = total_e = 0
    for kind, c in trace(args.model, args.step, args.size):
        k, e = sum(c["kernels"].values()), sum(c["externs"].values())
        total_k, total_e = total_k + k, total_e + e
        print(f"{kind}: {k} kernels, {e} externs")
        print("  kernels: " + ", ".join(f"{n} {m}" for n, m in c["kernels"].most_common(args.top)))
        print("  externs: " + ", ".join(f"{n} {m}" for n, m in c["externs"].most_common(args.top)))
    print(f"{args.model} {args.step} ({args.size}): {total_k} kernels, {total_e} externs a step")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
