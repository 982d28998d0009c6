"""coil's pipeline for one AOTAutograd graph (forward, backward or inference) -> a boxed callable.

`compile_graph` is the whole pipeline in one readable function (`_compile`), one named call per
stage: post-grad passes, lowering, scheduling, matmul templates, Triton codegen, autotuning, wrapper codegen, the
runtime's kernel compile and load, CUDA graphs (`_finish`). Before the pipeline, the
whole-graph cache (`graph_cache`, COIL_GRAPH_CACHE) is consulted: on a hit only the kernels and
the stored wrapper are loaded. `compile_for_aot_cache` returns the same callable as the entry
torch's AOTAutograd cache stores (`aot_cache.CoilOutputCode`), and `load_portable` rebuilds a
graph's callable from such an entry or from coil's frontend cache. Every stage's wall time goes
to `GraphStats.stage_times` (COIL_LOGS=compile_time logs it). coil.backend.pipeline.backend
calls this for each graph AOTAutograd hands it.
"""

from __future__ import annotations

import collections
import functools
import itertools
import logging
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import sympy
import torch
import torch.fx
from coil.backend.caches import aot_cache, frontend_cache, graph_cache, prehash
from coil.backend.caches.aot_cache import CoilOutputCode, PortableGraph
from coil.backend.debug import logs, peaks
from coil.backend.debug.artefacts import Artefacts
from coil.backend.debug.checks import LifetimeTracker, check_outputs, returned_storage
from coil.backend.debug.dump import spans
from coil.backend.errors import CoilCompileError
from coil.backend.pipeline import autotune, fallback, indirect_inputs, matmul_templates
from coil.backend.pipeline.device_guard import on_device
from coil.backend.pipeline.fake_calls import answering_fake_calls, fake_calls_expected
from coil.backend.pipeline.progress import compile_with_progress
from coil.backend.pipeline.static_inputs import dynamo_static_inputs
from coil.backend.stats import COMPILED, GraphStats, format_stage_times
from coil.fx_passes import GRAPH_KIND, adopt_input_strides, run_post_grad_passes
from coil.fx_passes.passes.channels_last import FREE_OUTPUTS
from coil.fx_passes.passes.pad_mm import PADDED_OUTPUTS
from coil.knobs import knobs
from coil.lowering_ir import InputBuffer, LoweredGraph, Pointwise, Reduction, SplitRule, lower
from coil.lowering_ir.devices import graph_device
from coil.runtime import (
    KernelSpec,
    TensorArg,
    interpreter_enabled,
    prefetch_kernels,
    prestart_compile_workers,
)
from coil.scheduler import KernelGroup, Schedule, schedule
from coil.scheduler.ordering import step_writes
from coil.triton_codegen import (
    OUTER_XBLOCK,
    CodegenOptions,
    KernelSource,
    generate,
    generate_schedule,
)
from coil.wrapper_codegen import (
    TRACKER,
    KernelLaunch,
    WrapperProgram,
    build,
    emit_python,
    track_lifetimes,
)
from coil.wrapper_codegen.segments import split_segments
from torch._inductor.codecache import torch_key

log = logging.getLogger("coil.backend")
_counter = itertools.count()
# torch's compiler is imported by now: its source key is hashed on a thread while Dynamo traces
prehash.hash_torch(torch_key)

CompiledFn = Callable[[list[Any]], Any]


def _stage(stats: GraphStats, stage: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run one stage of graph `stats.name`, adding its wall time to `stats.stage_times[stage]`;
    any error becomes a CoilCompileError naming the stage."""
    t0 = time.perf_counter()
    try:
        return fn(*args, **kwargs)
    except CoilCompileError:
        raise
    except Exception as e:
        raise CoilCompileError(stage, stats.name, e) from e
    finally:
        stats.stage_times[stage] = stats.stage_times.get(stage, 0.0) + time.perf_counter() - t0


def _device(graph: LoweredGraph) -> torch.device:
    """The device the graph's kernels run on: its CUDA device if it has one, else the CPU.

    Raises ValueError for tensors on any other device (meta, mps, ...): coil generates kernels
    for CUDA and for Triton's CPU interpreter only.
    """
    devices = {b.layout.device for b in graph.buffers().values()}
    other = sorted(str(d) for d in devices if d.type not in ("cpu", "cuda"))
    if other:
        raise ValueError(f"tensors on {', '.join(other)}: coil runs kernels on CUDA and on the CPU "
                         "(Triton interpreter) only")
    cuda = [d for d in devices if d.type == "cuda"]
    return cuda[0] if cuda else torch.device("cpu")


def _split_rule(gm: torch.fx.GraphModule) -> SplitRule:
    """The split-reduction rule's machine facts for `gm` (coil.lowering_ir.split_rule): the SM
    count of the CUDA device its tensors are on, or lowering's default without one (the CPU
    interpreter); codegen's outputs per outer-reduction program (OUTER_XBLOCK) either way. Part
    of the graph cache's key through the device (graph_cache.add_devices)."""
    device = graph_device(gm)
    if device.type == "cuda":
        return SplitRule(torch.cuda.get_device_properties(device).multi_processor_count, OUTER_XBLOCK)
    return SplitRule(outer_rows=OUTER_XBLOCK)


def _check_kernel_devices(sources: list[KernelSource], graph: LoweredGraph, device: torch.device) -> None:
    """Raise ValueError when a kernel would get a pointer to memory on another device."""
    bufs = graph.buffers()
    for ks in sources:
        elsewhere = [b for b in ks.pointer_args if bufs[b].layout.device.type != device.type]
        if elsewhere:
            where = ", ".join(f"{b} on {bufs[b].layout.device}" for b in elsewhere)
            raise ValueError(f"{ks.name} runs on {device} but would read or write {where}")


def _specs(sources: list[KernelSource], graph: LoweredGraph) -> list[KernelSpec]:
    bufs = graph.buffers()
    specs = []
    for ks in sources:  # the pointer table of a kernel reading inputs through it: int64 addresses
        args: list[TensorArg | int] = [TensorArg(bufs[b].layout.dtype if b != indirect_inputs.TABLE else torch.int64)
                                       for b in ks.pointer_args]
        args += [int(sympy.sympify(s).xreplace(graph.symbol_hints)) for s in ks.size_args]  # example values
        specs.append(KernelSpec(ks.name, ks.source, tuple(args), ks.constexprs, num_warps=ks.num_warps,
                                num_stages=ks.num_stages, debug=ks.debug))
    return specs


def compile_graph(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], *, kind: str,
                  check_inputs: bool = True) -> CompiledFn:
    """Compile one AOTAutograd graph (kind: forward, backward or inference) to a boxed callable.

    With `check_inputs` (default) the callable raises ValueError, before any kernel runs, on an
    input of another shape, stride, dtype or device than the example inputs'. `coil_backend`
    turns it off: Dynamo's guards already send such inputs to a recompile (COIL_CHECK_INPUTS=1
    checks anyway). With COIL_DEBUG_DIR set, the graph's artefacts and a repro go to
    `<dir>/<graph name>/` (the repro first, so a failed compile leaves one; the error goes to
    error.txt). A failed compile raises CoilCompileError with COIL_FALLBACK_ON_ERROR=0; otherwise,
    with one warning, the callable runs `gm` eagerly (coil.backend.pipeline.fallback; inside a
    backend call the whole Dynamo graph falls back instead).
    """
    return _compile_graph(gm, example_inputs, kind, check_inputs)[0]


def compile_for_aot_cache(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], *, kind: str) -> CoilOutputCode:
    """`compile_graph` (inputs unchecked: Dynamo guards them) as the CoilOutputCode torch's
    AOTAutograd cache stores."""
    t0 = time.perf_counter_ns()
    call, graph, stats = _compile_graph(gm, example_inputs, kind, False)
    static = stats.static_inputs
    code = (CoilOutputCode(kind, call, None, graph, load=load_portable, static_inputs=static)
            if isinstance(graph, str) else CoilOutputCode(kind, call, graph, load=load_portable, static_inputs=static))
    code._time_taken_ns = time.perf_counter_ns() - t0  # torch reports it as the time a hit saves
    return code


def _compile_graph(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], kind: str,
                   check_inputs: bool) -> tuple[CompiledFn, PortableGraph | str, GraphStats]:
    """`compile_graph`, also returning the graph as the AOT cache would store it (or why not)
    and the graph's GraphStats."""
    name = f"{kind}_{next(_counter)}"
    stats = GraphStats(name, fx_nodes=len(gm.graph.nodes), static_inputs=dynamo_static_inputs(example_inputs, kind))
    COMPILED.append(stats)
    out = Artefacts.open(gm, name, kind)
    reporting = _layout_free_outputs(gm, kind)
    traced = _output_strides(gm) if reporting is not None else []
    graph: PortableGraph | str
    try:
        if kind == "backward":  # saved activations come with the strides the forward reported
            adopt_input_strides(gm, example_inputs)
        call, graph = _compile(gm, name, kind, stats, out, check_inputs)
        if fake_calls_expected():  # DDPOptimizer's split graphs: the first call is made with fakes
            call = answering_fake_calls(call, gm, stats.output_strides)
    except Exception as e:
        out.failed(e)
        if not knobs.fallback_on_error:
            raise
        stats.eager_fallback = str(e)
        if fallback.falls_back_whole(kind):  # the backend runs the Dynamo graph instead
            warnings.warn(f"{e} -- {fallback.WHOLE_GRAPH}", stacklevel=2)
            raise fallback.DynamoGraphFallback(name, e) from e
        warnings.warn(f"{e} -- {fallback.PER_GRAPH}", stacklevel=2)
        stats.output_strides = _output_strides(gm)  # the graph runs as it is now, passes or not
        call, graph = fallback.per_graph(gm), f"{name} runs eagerly after a compile error"
    rec = frontend_cache.recorder()
    if rec is not None and kind == "inference":
        rec.note(graph, frontend_cache.plain_metadata(len(example_inputs)))
    if reporting is not None:
        # only the layouts coil changed (channels-last) are reported: AOTAutograd restrides the
        # backward's inputs to them; an unchanged one is None, which AOTAutograd skips (its
        # comparison of saved-tensor strides misaligned placeholders on linalg.solve's graph)
        reporting.extend(tuple(s) if s is not None and (i >= len(traced) or s != traced[i]) else None
                         for i, s in enumerate(stats.output_strides or ()))
    return call, graph, stats


def _layout_free_outputs(gm: torch.fx.GraphModule, kind: str) -> list[Any] | None:
    """For a forward graph compiled under AOTAutograd's `TracingContext.report_output_strides`:
    mark the outputs saved for the backward as free to change layout (`gm.meta[FREE_OUTPUTS]`,
    read by the channels-last pass) and return the list the strides of every output are to be
    reported in. AOTAutograd then gives the backward's example inputs those strides, which
    `adopt_input_strides` carries into the backward graph. None (nothing free, nothing reported)
    outside that context, for other kinds, or when AOTAutograd's metadata is not as expected."""
    context = torch._guards.TracingContext.try_get()
    strides = getattr(context, "output_strides", None)
    if kind != "forward" or strides is None or len(strides) != 0:
        return None
    try:
        saved = context.fw_metadata.tensors_saved_for_backwards_slice  # type: ignore[union-attr]
        n = len(next(n for n in reversed(gm.graph.nodes) if n.op == "output").args[0])
        gm.meta[FREE_OUTPUTS] = tuple(range(n)[saved])
    except Exception:  # another AOTAutograd than the one this was written against: keep every layout
        return None
    return strides  # type: ignore[no-any-return]


def _output_strides(gm: torch.fx.GraphModule) -> list[list[int] | None]:
    """Each output's strides as its `meta["val"]` says (what coil's wrapper returns: buffers are
    laid out as their FakeTensors); None for non-tensors and symbolic strides."""
    outs = next(n for n in reversed(gm.graph.nodes) if n.op == "output").args[0]
    result: list[list[int] | None] = []
    for a in outs if isinstance(outs, list | tuple) else [outs]:
        v = a.meta.get("val") if isinstance(a, torch.fx.Node) else None
        if isinstance(v, torch.Tensor) and all(isinstance(s, int) for s in v.stride()):
            result.append([int(s) for s in v.stride()])
        else:
            result.append(None)
    return result


def _prestart_workers(gm: torch.fx.GraphModule) -> None:
    """Start the compile workers when a graph with CUDA inputs is compiled for real (a cache
    miss): they import Triton while it is lowered and scheduled. Not on cache hits, which only
    load kernels: workers starting up would compete with the warm start for the CPU."""
    for n in gm.graph.nodes:
        v = n.meta.get("val") if n.op == "placeholder" else None
        if isinstance(v, torch.Tensor) and v.device.type == "cuda" and not interpreter_enabled(v.device):
            prestart_compile_workers()
            return


def _compile(gm: torch.fx.GraphModule, name: str, kind: str, stats: GraphStats, out: Artefacts,
             check_inputs: bool) -> tuple[CompiledFn, PortableGraph | str]:
    """The pipeline, one named stage per line (or a graph-cache hit); also the graph as the AOT
    cache would store it, or why it cannot be."""
    check_inputs = check_inputs or knobs.check_inputs
    # the outputs free to change layout decide the code, and the graph print does not show them
    free = gm.meta.get(FREE_OUTPUTS)
    key_kind = f"{kind} (layout-free outputs {list(free)})" if free else kind
    cache: graph_cache.Lookup = _stage(stats, "graph cache", graph_cache.lookup, gm, key_kind, check_inputs)
    stats.graph_cache = cache.status
    if cache.cached is not None:
        cached = cache.cached
        call = _from_cache(name, stats, cached, functools.partial(graph_cache.constant_values, gm, cached))
        if call is not None:
            graph = aot_cache.portable(name, kind, cached, graph_cache.constant_values(gm, cached))
            return _finish(call, name, kind, stats, torch.device(cached.device), cached.static_shapes), graph
        stats.graph_cache = "miss"
    _prestart_workers(gm)
    gm = _stage(stats, "post-grad passes", _post_grad_passes, gm, kind, out)
    stats.output_strides = _output_strides(gm)
    out.post_grad(gm)
    lowered: LoweredGraph = _stage(stats, "lowering", lower, gm, name, split=_split_rule(gm))
    out.ir(lowered)
    sched: Schedule = _stage(stats, "scheduling", schedule, lowered, fusion=knobs.fusion,
                             visit_order=knobs.fusion_visit_order, order_time_limit=knobs.order_time)
    device: torch.device = _stage(stats, "device", _device, lowered)
    target = "cuda" if device.type == "cuda" else "interpret"
    options = CodegenOptions(debug_asserts=knobs.debug_asserts)
    sched = _stage(stats, "matmul templates", matmul_templates.apply, sched, lowered, device, target, _specs,
                   options)  # COIL_MATMUL_TEMPLATES
    out.schedule(sched)
    bufs = lowered.buffers()
    sources: list[KernelSource] = _stage(stats, "triton codegen", generate_schedule, sched, bufs, target,
                                         knobs.reduction_strategy, lowered.symbol_hints, options)
    out.kernels(sources)
    _stage(stats, "device", _check_kernel_devices, sources, lowered, device)
    if autotune.enabled(device):  # COIL_AUTOTUNE: launch configurations chosen by timing
        prefetch_kernels(_specs(sources, lowered), device)  # they compile while the candidates are timed
        groups = {st.name: st for st in sched.steps if isinstance(st, KernelGroup)}

        def regenerate(ks: KernelSource, strategy: str, reread: bool = False) -> KernelSource | None:
            group = groups.get(ks.name)
            return None if group is None else generate(group, bufs, target, strategy, lowered.symbol_hints, options,
                                                       reread=reread)

        sources = _stage(stats, "autotune", autotune.tune_sources, sources, lowered, device, target, stats, _specs,
                         functools.partial(regenerate, strategy="looped"),
                         functools.partial(regenerate, strategy="persistent", reread=True))
    launches = {s.name: KernelLaunch(s.name, s.pointer_args, s.size_args, s.grid) for s in sources}
    program: WrapperProgram = _stage(stats, "wrapper codegen", build, sched, launches, reuse=knobs.reuse,
                                     check_inputs=check_inputs, arena=knobs.arena)
    out.memory_plan(sched, program)
    segments = None if knobs.check_lifetimes else split_segments(program)  # CUDA-graph segments
    lines, table = program.lines, None
    if segments is None and indirect_inputs.applies(kind, device, lowered):  # tangents read in place
        got = _stage(stats, "wrapper codegen", indirect_inputs.plan, gm, sched, sources, program.lines, target,
                     options)
        if got is not None:
            table, sources = got
            lines = table.lines
    namespace: dict[str, Any] = {}
    if knobs.check_lifetimes:  # Track lines report every allocation, free and step to the tracker
        lines = _stage(stats, "lifetime tracking", track_lifetimes, lines)
        namespace[TRACKER] = LifetimeTracker(
            name, spans(sched), returned_storage(program.lines), dict(program.reuse.storage) if program.reuse else None,
            {b: (a.name, off) for a in program.arenas for b, off in a.offsets.items()}, program.inplace)
    source: str = _stage(stats, "wrapper codegen", emit_python, lines, [s.name for s in sources],
                         sorted(program.constants), name, segments=segments, indirect=table)
    out.wrapper(source)
    out.wrapper_fx(program.lines)
    specs = _specs(sources, lowered)
    kernels = _stage(stats, "runtime compile", compile_with_progress, specs, device, name)
    call = _stage(stats, "load", _load, source, name, namespace, device, program.constants, kernels)
    _record(stats, lowered, sched, sources, program, source)
    log.info("compiled %s: %d kernels, %d externs, fallbacks %s", name, stats.kernels, stats.externs, stats.fallbacks)
    if cache.stores:
        _stage(stats, "graph cache", graph_cache.store, cache, name, kind, source, specs, program.constants, device,
               not lowered.symbol_hints, _cached_stats(stats))
    entry = graph_cache.CachedGraph(source, tuple(specs), {}, str(device), not lowered.symbol_hints, _cached_stats(stats))
    graph = aot_cache.portable(name, kind, entry, program.constants)
    return _finish(call, name, kind, stats, device, not lowered.symbol_hints), graph


def _finish(call: Callable[[list[Any]], Any], name: str, kind: str, stats: GraphStats, device: torch.device,
            static_shapes: bool) -> CompiledFn:
    """The boxed callable: CUDA-graph replay when it applies, NaN checks when asked, its
    allocated peak measured under coil.backend.measure_peaks (a CUDA graph run as plain
    launches only: a replay allocates nothing); logs the stage times (COIL_LOGS=compile_time)."""
    run = _cuda_graphs(call, kind, stats, device, static_shapes)
    logs.emit("compile_time", f"{name}: compile time (graph cache {stats.graph_cache})",
              format_stage_times(stats.stage_times))
    measured = (stats, device) if device.type == "cuda" and run is call else None
    return _boxed(on_device(run, device), name if knobs.check_nan else None, measured)


def _cuda_graphs(call: Callable[[list[Any]], Any], kind: str, stats: GraphStats, device: torch.device,
                 static_shapes: bool) -> Callable[[list[Any]], Any]:
    """`call` replayed as CUDA graphs where that applies (docs/architecture.md, "CUDA graphs").

    COIL_CUDA_GRAPHS and a CUDA device are needed; forward and backward graphs also need
    COIL_CUDA_GRAPHS_TRAINING. A wrapper with steps a graph cannot capture carries a segment plan
    (`call.segments`): with static shapes its capturable segments replay, the rest runs eagerly
    (coil.runtime.segments; `stats.cuda_graph_segments` says what each segment became). Otherwise
    the whole graph is one CUDA graph; training graphs hand their outputs out uncloned and hold
    none (the forward's saved activations, the backward's gradients) under the liveness rule, and
    a graph reads what an earlier one handed out (a backward its saved activations, a loss graph
    after a graph break its logits) in place, in that graph's pool, reusing the memory once read
    (coil.runtime.cudagraph, "Handed-out outputs"). Parameters and `stats.static_inputs` (module
    buffers) are used in place. A graph is captured once per call site (its parameters' addresses:
    a layer's graph called for every layer) and, with symbolic sizes, once per size met
    (`cudagraphify`'s sites).
    The knob cuda_graph_segments_uncaptured runs the segment plan without capture on any device.
    """
    plan = getattr(call, "segments", None)
    if plan is not None and knobs.cuda_graph_segments_uncaptured:
        from coil.runtime.segments import SegmentedRunner

        return SegmentedRunner(plan, capture=False, report=stats.cuda_graph_segments)
    training = kind in ("forward", "backward")
    if not (knobs.cuda_graphs and device.type == "cuda") or (training and not knobs.cuda_graphs_training):
        return call
    launches = stats.kernels + stats.externs
    if plan is not None:
        if not static_shapes:  # segments are captured at one size
            return call
        from coil.runtime.segments import SegmentedRunner

        return SegmentedRunner(plan, capture=True, also_static=stats.static_inputs,
                               report=stats.cuda_graph_segments)
    from coil.runtime import CaptureSpec, ReplayPolicy, cudagraphify

    if kind in ("forward", "backward"):
        # outputs handed out uncloned, not held (coil.runtime.handouts); inputs that an earlier
        # training graph handed out (a backward's saved activations, a loss graph's logits after a
        # graph break) are read in place, in that graph's pool, and freed once read as in eager;
        # a backward's tangents read through the wrapper's pointer table are read where they are
        spec = CaptureSpec(also_static=stats.static_inputs, indirect=getattr(call, "indirect", None), device=device,
                           launches=launches)
        return cudagraphify(call, spec, ReplayPolicy(borrow_inputs=True, hold_outputs=False), by_shape=not static_shapes)
    # inference: outputs handed out uncloned, copied away before the next replay only if still held
    spec = CaptureSpec(also_static=stats.static_inputs, device=device, launches=launches)
    return cudagraphify(call, spec, ReplayPolicy(lazy_clones=knobs.cuda_graph_lazy_clones), by_shape=not static_shapes)


def _from_cache(name: str, stats: GraphStats, cached: graph_cache.CachedGraph,
                constant_values: Callable[[], dict[str, torch.Tensor]],
                origin: str = "graph cache") -> Callable[[list[Any]], Any] | None:
    """Load a cached graph: its kernels (kernel disk cache) and its wrapper, with the constants
    `constant_values()` gives. None when the entry does not load (logged at INFO; a graph-cache
    entry is then rebuilt by the full pipeline)."""
    device = torch.device(cached.device)
    wrapper = cached.wrapper
    if wrapper.startswith("# coil wrapper for "):  # the first line names the graph it was compiled as
        wrapper = f"# coil wrapper for {name} ({origin})" + wrapper[wrapper.index("\n"):]
    try:
        constants = constant_values()
        kernels = _stage(stats, "runtime compile", compile_with_progress, list(cached.specs), device, name)
        call: Callable[[list[Any]], Any] = _stage(stats, "load", _load, wrapper, name, {}, device, constants,
                                                  kernels)
    except Exception as e:  # a damaged entry: rebuilt by the full pipeline, no warning
        log.info("%s: the entry for %s did not load (%s): rebuilding it", origin, name, e)
        return None
    for field, value in cached.stats.items():
        if field in _CACHED_STATS:
            if value is not None and field == "planned_peak":
                value = tuple(value)
            elif value is not None and field == "planned_profile":  # JSON lists back to the tuple form
                value = (list(value[0]), [(int(i), int(n), int(t)) for i, n, t in value[1]])
            setattr(stats, field, value)
    stats.kernel_sources = {s.name: s.source for s in cached.specs}
    stats.wrapper_source = wrapper
    log.info("compiled %s from the %s: %d kernels, %d externs", name, origin, stats.kernels, stats.externs)
    return call


def load_portable(kind: str, cached: graph_cache.CachedGraph, constants: dict[str, torch.Tensor],
                  static_inputs: tuple[int, ...] = (), *, frontend: bool = False) -> CompiledFn:
    """The callable of a graph loaded from torch's AOTAutograd cache (`CoilOutputCode.post_compile`)
    or, with `frontend`, from coil's frontend cache: its kernels and wrapper, as on a graph-cache
    hit; recorded in COMPILED (graph_cache "hit", and aot_cache or frontend_cache "hit");
    `static_inputs` as the compile found them (GraphStats.static_inputs). Raises LookupError when
    it does not load (torch then bypasses its cache and compiles the Dynamo graph again; the
    frontend cache's caller compiles it as on a miss)."""
    name = f"{kind}_{next(_counter)}"
    origin = "frontend cache" if frontend else "AOT cache"
    stats = GraphStats(name, graph_cache="hit", static_inputs=static_inputs)
    if frontend:
        stats.frontend_cache = "hit"
    else:
        stats.aot_cache = "hit"
    call = _from_cache(name, stats, cached, lambda: constants, origin=origin)
    if call is None:
        raise LookupError(f"{origin}: the entry for {name} did not load")
    COMPILED.append(stats)
    return _finish(call, name, kind, stats, torch.device(cached.device), cached.static_shapes)


# GraphStats fields a graph-cache entry keeps (kernel_sources and wrapper_source come with the code)
_CACHED_STATS = ("ir_ops", "kernels", "externs", "extern_ops", "fallbacks", "kernel_origins", "reused_buffers", "arena_bytes",
                 "planned_peak", "planned_inputs", "planned_profile", "output_strides", "autotuned", "autotune_switched",
                 "autotune_choices")


def _cached_stats(stats: GraphStats) -> dict[str, Any]:
    return {f: getattr(stats, f) for f in _CACHED_STATS}


def _load(source: str, name: str, namespace: dict[str, Any], device: torch.device,
          constants: dict[str, torch.Tensor], kernels: dict[str, Any]) -> Callable[[list[Any]], Any]:
    """Execute the wrapper module `source` in `namespace`; return its `make(...)` callable."""
    exec(compile(source, f"<coil wrapper {name}>", "exec"), namespace)
    return namespace["make"](device, constants, kernels)  # type: ignore[no-any-return]


def _post_grad_passes(gm: torch.fx.GraphModule, kind: str, out: Artefacts) -> torch.fx.GraphModule:
    """fx_passes.run_post_grad_passes, each pass reported to `out` when per-pass graphs are
    wanted (debug dir or COIL_LOGS=graph). An inference graph's outputs may be row-padded views
    (`PADDED_OUTPUTS`): the caller alone reads them, no backward was compiled for their layout.
    Every graph carries its kind (`GRAPH_KIND`) for the passes that choose by it."""
    gm.meta[GRAPH_KIND] = kind
    if kind == "inference":
        gm.meta[PADDED_OUTPUTS] = True
    return run_post_grad_passes(gm, is_backward=kind == "backward", on_pass=out.after_pass if out.wants_passes else None)


def _less_inplace(sched: Schedule, program: WrapperProgram, lowered: LoweredGraph) -> list[int]:
    """The order's live bytes per step (`OrderReport.step_bytes`) less, at each step that writes
    an output in place (`WrapperProgram.inplace`), that output's bytes: the scheduler's model
    counts it beside the buffer whose storage it takes."""
    assert sched.order is not None
    out = list(sched.order.step_bytes)
    bufs = lowered.buffers()
    for i, st in enumerate(sched.steps[:len(out)]):
        for w in step_writes(st):
            if w in program.inplace:
                out[i] -= int(bufs[w].nbytes_expr)
    return out


def _record(stats: GraphStats, lowered: LoweredGraph, sched: Schedule, sources: list[KernelSource],
            program: WrapperProgram, source: str) -> None:
    stats.ir_ops = sum(isinstance(op, Pointwise | Reduction) for op in lowered.operations)
    stats.kernels = len(sources)
    externs = sched.externs()
    stats.externs = len(externs)
    stats.extern_ops = dict(collections.Counter(str(e.kernel) for e in externs))
    stats.fallbacks = list(program.fallback_ops)
    stats.kernel_origins = [list(s.origins) for s in sources]
    stats.kernel_sources = {s.name: s.source for s in sources}
    stats.wrapper_source = source
    if program.reuse is not None:
        stats.reused_buffers = sum(1 for b, d in program.reuse.storage.items() if b != d)
    stats.arena_bytes = [(a.nbytes, a.lower_bound) for a in program.arenas]
    if sched.order is not None:  # an arena is held whole over its span: what that adds is the wrapper's
        step_bytes = _less_inplace(sched, program, lowered)
        saved = max(sched.order.step_bytes, default=0) - max(step_bytes, default=0)
        stats.planned_peak = (sched.order.baseline_peak, sched.order.peak - saved + program.arena_peak_delta)
        stats.planned_inputs = sched.order.inputs
        position = {b.name: k for k, b in enumerate(lowered.inputs) if isinstance(b, InputBuffer)}
        if step_bytes and not program.arenas:  # the profile does not model arenas
            stats.planned_profile = (step_bytes,
                                     [(position[n], size, last) for n, size, last in sched.order.input_last
                                      if n in position])


def _boxed(fn: Callable[[list[Any]], Any], check_nan: str | None = None,
           measured: tuple[GraphStats, torch.device] | None = None) -> CompiledFn:
    """The boxed callable; with `check_nan` (the graph's name) outputs are checked for NaN/Inf;
    with `measured` (the graph's stats and device) its allocated peak is measured while
    coil.backend.measure_peaks is on (coil.backend.debug.peaks)."""
    def call(args: list[Any]) -> Any:
        if measured is not None and peaks.ON:
            result = peaks.measured_call(fn, args, *measured)
        else:
            result = fn(args)
        if check_nan is not None:
            check_outputs(check_nan, result)
        return result

    call._boxed_call = True  # type: ignore[attr-defined]
    return call

