"""Export memory-planner graphs of real training steps (GPT-2, BERT-base, ResNet-50).

Usage (from the repository root, in the project's virtual environment)::

    python tools/export_planner_graphs.py [--out DIR] [--models gpt2,bert,resnet50]

Each model is built from its published configuration with random weights and run for one
training step (forward, loss, backward; no optimizer) under ``torch.compile`` with a capturing
backend that follows coil's own pipeline (``coil.backend.coil_backend``) up to scheduling:

    Dynamo -> fx_passes.run_pre_grad_passes -> AOTAutograd (coil's decomposition table,
    min-cut partitioner, keep_inference_input_mutations) -> per forward/backward graph:
    fx_passes.run_post_grad_passes -> lowering_ir.lower -> scheduler.schedule (fusion on,
    memory-aware ordering off, so the steps are in coil's fused order)
    -> scheduler.planner_graph (the graph coil's scheduler hands to the memory planner)

No arithmetic happens in the traced graphs: the capturing compilers return functions that
allocate empty outputs with the traced shapes and strides (the ``meta`` device would avoid even
that, but on it autograd does not differentiate ``nll_loss``, so the backward comes out empty).
Only building the models (random initialisation) computes anything.

Three files per model, gzip-compressed planner graph JSON (``coil.memory_planner.write_graph_json``):

* ``<model>_fw.json.gz`` — the forward graph;
* ``<model>_bw.json.gz`` — the backward graph;
* ``<model>_train.json.gz`` — the training step: forward then backward in one graph. The
  forward's saved outputs that the backward reads become internal buffers (the backward reads
  the forward's storage); parameters and the forward's other inputs are shared; the backward's
  tangent inputs stay graph inputs; the forward's user outputs (the loss) and the backward's
  gradients are graph outputs. Node names are ``f.s<i>`` / ``b.s<i>``, buffer names are
  prefixed ``f.`` / ``b.``; the baseline order is the forward's steps, then the backward's.

Sizes are bytes: ``storage_extent * itemsize`` of each storage buffer (fp32 models).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.fx
from coil.fx_passes import run_post_grad_passes, run_pre_grad_passes
from coil.lowering_ir import Buffer as IRBuffer
from coil.lowering_ir import InputBuffer, LoweredGraph, ReinterpretView, decomposition_table, lower
from coil.memory_planner import Buffer, Graph, Node, peak_of_order, write_graph_json
from coil.scheduler import output_buffers, planner_graph, schedule
from torch import nn
from torch._functorch.aot_autograd import aot_module_simplified
from torch._functorch.partitioners import min_cut_rematerialization_partition

DEVICE = torch.device("cpu")


# -- ResNet-50 (torchvision is not installed here) -----------------------------------------------


class Bottleneck(nn.Module):
    """ResNet bottleneck block (1x1 reduce, 3x3 with the stride, 1x1 expand x4; the "v1.5"
    layout torchvision uses), batch norm after each conv, projection shortcut when the shape
    changes."""

    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int) -> None:
        super().__init__()
        out = planes * self.expansion
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, out, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out)
        self.relu = nn.ReLU(inplace=True)
        self.downsample: nn.Module | None = None
        if stride != 1 or inplanes != out:
            self.downsample = nn.Sequential(
                nn.Conv2d(inplanes, out, 1, stride=stride, bias=False), nn.BatchNorm2d(out)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        idt = x if self.downsample is None else self.downsample(x)
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return self.relu(y + idt)  # type: ignore[no-any-return]


class ResNet50(nn.Module):
    """ResNet-50 (He et al., 2016): 7x7/2 stem + max pool, bottleneck stages [3, 4, 6, 3] of
    widths 64, 128, 256, 512 (outputs 256..2048), global average pool, 1000-way linear."""

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        stages: list[nn.Module] = []
        inplanes = 64
        for planes, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            layers = []
            for k in range(blocks):
                layers.append(Bottleneck(inplanes, planes, stride if k == 0 else 1))
                inplanes = planes * Bottleneck.expansion
            stages.append(nn.Sequential(*layers))
        self.layers = nn.Sequential(*stages)
        self.fc = nn.Linear(2048, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layers(x)
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))  # type: ignore[no-any-return]


# -- the models: (description, build) where build() -> (module, loss function of the module) -----


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """A model to export: a one-line description and ``build() -> (module, loss of module)``."""

    description: str
    build: Callable[[], tuple[nn.Module, Callable[[nn.Module], torch.Tensor]]]


def _gpt2(batch: int, seq: int) -> tuple[nn.Module, Callable[[nn.Module], torch.Tensor]]:
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(use_cache=False)
    model: Any = GPT2LMHeadModel(cfg)
    model.to(DEVICE).train()
    model.loss_type = "ForCausalLM"  # unset in the config: HF would log a warning Dynamo cannot trace
    ids = torch.zeros(batch, seq, dtype=torch.long, device=DEVICE)
    return model, lambda m: m(input_ids=ids, labels=ids).loss


def _bert(batch: int, seq: int) -> tuple[nn.Module, Callable[[nn.Module], torch.Tensor]]:
    from transformers import BertConfig, BertForMaskedLM

    cfg = BertConfig()
    model: Any = BertForMaskedLM(cfg)
    model.to(DEVICE).train()
    model.loss_type = "ForMaskedLM"
    ids = torch.zeros(batch, seq, dtype=torch.long, device=DEVICE)
    return model, lambda m: m(input_ids=ids, labels=ids).loss


def _resnet50(batch: int) -> tuple[nn.Module, Callable[[nn.Module], torch.Tensor]]:
    model = ResNet50().to(DEVICE).train()
    images = torch.zeros(batch, 3, 224, 224, device=DEVICE)
    labels = torch.zeros(batch, dtype=torch.long, device=DEVICE)
    return model, lambda m: nn.functional.cross_entropy(m(images), labels)


def model_specs(batch_lm: int, seq: int, batch_cnn: int) -> dict[str, ModelSpec]:
    """The exported models by name."""
    return {
        "gpt2": ModelSpec(f"GPT2LMHeadModel(GPT2Config(use_cache=False)), batch {batch_lm} x seq {seq}, LM loss",
                          functools.partial(_gpt2, batch_lm, seq)),
        "bert": ModelSpec(f"BertForMaskedLM(BertConfig()), batch {batch_lm} x seq {seq}, MLM loss",
                          functools.partial(_bert, batch_lm, seq)),
        "resnet50": ModelSpec(f"ResNet-50, batch {batch_cnn} x 3 x 224 x 224, cross-entropy",
                              functools.partial(_resnet50, batch_cnn)),
    }


# -- capture: coil's pipeline up to scheduling ---------------------------------------------------


@dataclasses.dataclass
class Captured:
    """One AOTAutograd graph after scheduling, with what the join needs."""

    kind: str  # forward | backward
    graph: Graph  # the planner graph of the scheduled steps
    placeholders: list[str]  # FX placeholder names, by input position
    inputs: list[str | None]  # planner buffer of each input position (None: not a tensor / unused)
    output_nodes: list[str | None]  # FX node name of each output position
    outputs: list[str | None]  # planner buffer (storage) of each output position


def _output_args(gm: torch.fx.GraphModule) -> list[Any]:
    """The values the graph returns (AOTAutograd graphs return a tuple or list)."""
    args = gm.graph.output_node().args[0]
    assert isinstance(args, tuple | list)
    return list(args)


def _storage(value: Any) -> str | None:
    if isinstance(value, IRBuffer | ReinterpretView):
        return str(value.storage.name)
    return None


def _stop_after_scheduling(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], *, kind: str,
                           sink: list[Captured]) -> Callable[..., Any]:
    """AOTAutograd compiler: run coil's post-grad passes, lowering and scheduling, record the
    planner graph, and return a boxed function that computes nothing (:func:`_empty_outputs`)."""
    # names as the partitioner gave them (the backward's placeholders are named after the
    # forward's saved outputs); post-grad passes may rename nodes but keep positions
    placeholders = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    output_nodes = [a.name if isinstance(a, torch.fx.Node) else None for a in _output_args(gm)]
    gm = run_post_grad_passes(gm, is_backward=kind == "backward")
    lowered: LoweredGraph = lower(gm, f"{kind}_{len(sink)}")
    outs = output_buffers(lowered.outputs)
    sched = schedule(lowered, fusion=True, order_time_limit=0.0)
    pg = planner_graph(sched.steps, lowered, outs)
    if pg is None:
        raise RuntimeError(f"{kind} graph has symbolic sizes; export needs static shapes")
    names = {b.name for b in pg.buffers}
    inputs = [b.name if isinstance(b, InputBuffer) and b.name in names else None for b in lowered.inputs]
    sink.append(Captured(kind, pg, placeholders, inputs, output_nodes,
                         [_storage(o) for o in lowered.outputs]))
    return _empty_outputs(_output_args(gm))


def _empty_outputs(outputs: Sequence[Any]) -> Callable[..., Any]:
    """A boxed callable returning uninitialised tensors shaped like the graph's outputs."""
    vals = [o.meta["val"] if isinstance(o, torch.fx.Node) else o for o in outputs]

    def run(args: list[Any]) -> list[Any]:
        args.clear()
        return [torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device=v.device)
                if isinstance(v, torch.Tensor) else v for v in vals]

    run._boxed_call = True  # type: ignore[attr-defined]
    return run


def capture_backend(sink: list[Captured]) -> Callable[..., Any]:
    """A torch.compile backend doing what coil.backend.coil_backend does up to scheduling."""

    def backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], **_: Any) -> Any:
        gm = run_pre_grad_passes(gm, example_inputs)
        return aot_module_simplified(
            gm,
            list(example_inputs),
            fw_compiler=functools.partial(_stop_after_scheduling, kind="forward", sink=sink),
            bw_compiler=functools.partial(_stop_after_scheduling, kind="backward", sink=sink),
            decompositions=decomposition_table(),
            partition_fn=min_cut_rematerialization_partition,
            keep_inference_input_mutations=True,
        )

    return backend


# -- the joined training-step graph ---------------------------------------------------------------


def _renamed(graph: Graph, prefix: str, rename: dict[str, str]) -> tuple[list[Node], dict[str, str]]:
    """Nodes of ``graph`` with buffer names mapped (``rename`` first, else ``prefix + name``)."""
    names = {b.name: rename.get(b.name, prefix + b.name) for b in graph.buffers}
    nodes = [Node(prefix + n.name, tuple(names[r] for r in n.reads), tuple(names[w] for w in n.writes))
             for n in graph.nodes]
    return nodes, names


def join_training_step(fw: Captured, bw: Captured) -> Graph:
    """One graph for forward then backward (see the module docstring for the rules)."""
    fw_by_node = {node: buf for node, buf in zip(fw.output_nodes, fw.outputs, strict=True)
                  if node is not None and buf is not None}
    fw_inputs = {ph: buf for ph, buf in zip(fw.placeholders, fw.inputs, strict=True) if buf is not None}
    rename_bw: dict[str, str] = {}
    for ph, buf in zip(bw.placeholders, bw.inputs, strict=True):
        if buf is None:
            continue
        if ph in fw_by_node:
            rename_bw[buf] = "f." + fw_by_node[ph]
        elif ph in fw_inputs:
            rename_bw[buf] = "f." + fw_inputs[ph]
        elif not ph.startswith("tangents"):
            raise RuntimeError(f"backward input {ph!r} is neither a forward output nor a forward input")
    fw_nodes, fw_names = _renamed(fw.graph, "f.", {})
    bw_nodes, bw_names = _renamed(bw.graph, "b.", rename_bw)
    saved = set(rename_bw.values())
    user_outputs = {fw.outputs[k] for k, node in enumerate(fw.output_nodes)
                    if node is not None and node not in bw.placeholders}
    buffers: list[Buffer] = []
    for b in fw.graph.buffers:
        name = fw_names[b.name]
        output = b.output and (b.name in user_outputs or name not in saved)
        buffers.append(dataclasses.replace(b, name=name, output=output))
    for b in bw.graph.buffers:
        if b.name not in rename_bw:
            buffers.append(dataclasses.replace(b, name=bw_names[b.name]))
    return Graph(tuple(buffers), tuple(fw_nodes + bw_nodes))


# -- main -------------------------------------------------------------------------------------------


def export(name: str, spec: ModelSpec, out: Path) -> list[tuple[str, Graph]]:
    """Trace one model's training step and write its three graphs; returns (file name, graph)."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    model, loss_fn = spec.build()
    sink: list[Captured] = []
    step = torch.compile(loss_fn, backend=capture_backend(sink), fullgraph=True)
    loss = step(model)
    loss.backward()  # type: ignore[no-untyped-call]
    fws = [c for c in sink if c.kind == "forward"]
    bws = [c for c in sink if c.kind == "backward"]
    if len(fws) != 1 or len(bws) != 1:
        raise RuntimeError(f"{name}: expected one forward and one backward graph, got {len(fws)}, {len(bws)}")
    graphs = [(f"{name}_fw.json.gz", fws[0].graph), (f"{name}_bw.json.gz", bws[0].graph),
              (f"{name}_train.json.gz", join_training_step(fws[0], bws[0]))]
    for fname, g in graphs:
        write_graph_json(out / fname, g)
    return graphs


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=Path("packages/memory-planner/benchmarks/graphs"))
    p.add_argument("--models", default="gpt2,bert,resnet50")
    p.add_argument("--batch-lm", type=int, default=4, help="GPT-2 / BERT batch")
    p.add_argument("--seq", type=int, default=512, help="GPT-2 / BERT sequence length")
    p.add_argument("--batch-cnn", type=int, default=32, help="ResNet-50 batch")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    specs = model_specs(args.batch_lm, args.seq, args.batch_cnn)
    print(f"torch {torch.__version__}; writing to {args.out}")
    for name in args.models.split(","):
        t0 = time.monotonic()
        graphs = export(name, specs[name], args.out)
        print(f"{name}: {specs[name].description} ({time.monotonic() - t0:.0f} s)")
        for fname, g in graphs:
            peak = peak_of_order(g, range(len(g.nodes)))
            size = (args.out / fname).stat().st_size
            print(f"  {fname}: {len(g.nodes)} nodes, {len(g.buffers)} buffers, "
                  f"baseline peak {peak / 2**20:.1f} MiB, file {size / 1024:.0f} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
