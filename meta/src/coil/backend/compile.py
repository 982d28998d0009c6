"""The coil backend: `torch.compile(model, backend="coil")`.

`coil_backend` runs pre-grad passes, then AOTAutograd with coil's decomposition table and the
min-cut partitioner; each forward/backward/inference graph goes through `compile_graph`, the
whole pipeline in one readable function, one named call per stage.
"""

from __future__ import annotations

import functools
import itertools
import logging
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx
from coil.backend.errors import CoilCompileError
from coil.backend.knobs import knobs
from coil.backend.stats import COMPILED, GraphStats
from coil.fx_passes import run_post_grad_passes, run_pre_grad_passes
from coil.lowering_ir import LoweredGraph, Pointwise, Reduction, decomposition_table, lower
from coil.runtime import KernelSpec, TensorArg, compile_kernels
from coil.scheduler import Schedule, schedule
from coil.triton_codegen import KernelSource, generate
from coil.wrapper_codegen import KernelLaunch, WrapperProgram, build, emit_python
from torch._functorch.aot_autograd import aot_module_simplified
from torch._functorch.partitioners import min_cut_rematerialization_partition

log = logging.getLogger("coil.backend")
_counter = itertools.count()

CompiledFn = Callable[[list[Any]], Any]


def _stage(stage: str, graph: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run one stage; any error becomes a CoilCompileError naming the stage."""
    try:
        return fn(*args, **kwargs)
    except CoilCompileError:
        raise
    except Exception as e:
        raise CoilCompileError(stage, graph, e) from e


def _device(graph: LoweredGraph) -> torch.device:
    devices = {b.layout.device for b in graph.buffers().values()}
    cuda = [d for d in devices if d.type == "cuda"]
    return cuda[0] if cuda else torch.device("cpu")


def _specs(sources: list[KernelSource], graph: LoweredGraph) -> list[KernelSpec]:
    bufs = graph.buffers()
    specs = []
    for ks in sources:
        args: list[TensorArg | int] = [TensorArg(bufs[b].layout.dtype) for b in ks.pointer_args]
        args += [int(s) for s in ks.size_args]
        specs.append(KernelSpec(ks.name, ks.source, tuple(args), ks.constexprs, num_warps=ks.num_warps))
    return specs


def compile_graph(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], *, kind: str) -> CompiledFn:
    """Compile one AOTAutograd graph (kind: forward, backward or inference) to a boxed callable."""
    name = f"{kind}_{next(_counter)}"
    stats = GraphStats(name, fx_nodes=len(gm.graph.nodes))
    COMPILED.append(stats)
    try:
        return _compile(gm, name, kind, stats)
    except Exception as e:
        if not knobs.fallback_on_error:
            raise
        warnings.warn(f"{e} -- running this graph eagerly (set COIL_FALLBACK_ON_ERROR=0 to raise)", stacklevel=2)
        stats.eager_fallback = str(e)
        return _eager(gm)


def _compile(gm: torch.fx.GraphModule, name: str, kind: str, stats: GraphStats) -> CompiledFn:
    gm = _stage("post-grad passes", name, run_post_grad_passes, gm, is_backward=kind == "backward")
    lowered: LoweredGraph = _stage("lowering", name, lower, gm, name)
    sched: Schedule = _stage("scheduling", name, schedule, lowered, fusion=knobs.fusion)
    device = _device(lowered)
    target = "cuda" if device.type == "cuda" else "interpret"
    bufs = lowered.buffers()
    sources: list[KernelSource] = _stage(
        "triton codegen", name, lambda: [generate(k, bufs, target, knobs.reduction_strategy) for k in sched.kernels()])
    launches = {s.name: KernelLaunch(s.name, s.pointer_args, s.size_args, s.grid) for s in sources}
    program: WrapperProgram = _stage("wrapper codegen", name, build, sched, launches, reuse=knobs.reuse)
    source: str = _stage("wrapper codegen", name, emit_python, program.lines, [s.name for s in sources],
                         sorted(program.constants), name)
    kernels = _stage("runtime compile", name, compile_kernels, _specs(sources, lowered), device)
    namespace: dict[str, Any] = {}
    exec(compile(source, f"<coil wrapper {name}>", "exec"), namespace)
    call = namespace["make"](device, program.constants, kernels)
    _record(stats, lowered, sched, sources, program, source)
    log.info("compiled %s: %d kernels, %d externs, fallbacks %s", name, stats.kernels, stats.externs, stats.fallbacks)
    return _boxed(call)


def _record(stats: GraphStats, lowered: LoweredGraph, sched: Schedule, sources: list[KernelSource],
            program: WrapperProgram, source: str) -> None:
    stats.ir_ops = sum(isinstance(op, Pointwise | Reduction) for op in lowered.operations)
    stats.kernels = len(sources)
    stats.externs = len(sched.externs())
    stats.fallbacks = list(program.fallback_ops)
    stats.kernel_origins = [list(s.origins) for s in sources]
    stats.kernel_sources = {s.name: s.source for s in sources}
    stats.wrapper_source = source
    if program.reuse is not None:
        stats.reused_buffers = sum(1 for b, d in program.reuse.storage.items() if b != d)


def _boxed(fn: Callable[[list[Any]], Any]) -> CompiledFn:
    def call(args: list[Any]) -> Any:
        return fn(args)

    call._boxed_call = True  # type: ignore[attr-defined]
    return call


def _eager(gm: torch.fx.GraphModule) -> CompiledFn:
    def call(args: list[Any]) -> Any:
        a = list(args)
        args.clear()
        return gm(*a)

    call._boxed_call = True  # type: ignore[attr-defined]
    return call


def coil_backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], **_: Any) -> Callable[..., Any]:
    """The torch.compile backend (registered as "coil" through the torch_dynamo_backends entry point)."""
    gm = run_pre_grad_passes(gm, example_inputs)
    return aot_module_simplified(  # type: ignore[no-any-return]
        gm,
        list(example_inputs),
        fw_compiler=functools.partial(compile_graph, kind="forward"),
        bw_compiler=functools.partial(compile_graph, kind="backward"),
        inference_compiler=functools.partial(compile_graph, kind="inference"),
        decompositions=decomposition_table(),
        partition_fn=min_cut_rematerialization_partition,
        keep_inference_input_mutations=True,
    )
