"""The coil backend: `torch.compile(model, backend="coil")`, one call per Dynamo graph.

`coil_backend` (the torch_dynamo_backends entry point "coil") turns torch.compile's `mode` and
`options` into knob overrides for the call, then: coil's frontend cache (`frontend_cache`,
COIL_FRONTEND_CACHE) may serve an inference graph of an earlier process without AOTAutograd; else
pre-grad passes run (attention first rewritten into coil's attention op per COIL_ATTENTION:
`attention`), then AOTAutograd with coil's decomposition table (built only when AOTAutograd
traces: `lazy_table`) and coil's partitioner (`partition`), whose forward, backward and
inference compilers are coil's per-graph pipeline (`compile.compile_graph`). torch's AOTAutograd
cache (`aot_cache`, COIL_AOT_CACHE) may return the whole AOTAutograd result of an earlier
process: then no AOTAutograd tracing and no coil stage runs, and `compile.load_portable`
rebuilds each graph's callable. When a graph fails to compile, or AOTAutograd fails around coil's
compilers (COIL_FALLBACK_ON_ERROR on), the call returns the Dynamo graph itself, run eagerly as
captured (`fallback`). What each call did
goes to `stats.BACKEND_CALLS`.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.fx
from coil.backend.caches import aot_cache, frontend_cache, graph_cache
from coil.backend.config import options as compile_options
from coil.backend.pipeline import attention, fallback
from coil.backend.pipeline.compile import compile_for_aot_cache, compile_graph, load_portable
from coil.backend.pipeline.lazy_table import LazyTable
from coil.backend.pipeline.partition import partition
from coil.backend.pipeline.static_inputs import marked_static
from coil.backend.stats import BACKEND_CALLS, COMPILED, BackendCall
from coil.fx_passes import run_pre_grad_passes
from coil.knobs import knobs
from coil.lowering_ir import decomposition_table

log = logging.getLogger("coil.backend")


@functools.cache
def _decomposition_table() -> dict[Any, Callable[..., Any]]:
    return decomposition_table()


def _decompositions() -> LazyTable:
    """lowering_ir.decomposition_table() for one backend call: built at most once per process
    (a visible cost), and only when AOTAutograd first reads it (it traces), never on a hit in
    its cache (a warm start); each backend call gets its own copy of the dict."""
    return LazyTable(_decomposition_table)


def coil_backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], *, mode: str | None = None,
                 options: Mapping[str, Any] | None = None, **_: Any) -> Callable[..., Any]:
    """The torch.compile backend (registered as "coil" through the torch_dynamo_backends entry point).

    `mode` and `options` (torch.compile's) become knob overrides for this compile
    (coil.backend.config.options; a ValueError names a bad one). With the AOT cache usable
    (`aot_cache.unusable`), the compilers are torch's serializable ones and a hit in torch's
    AOTAutograd cache returns without tracing or compiling; otherwise (the reason is logged at
    INFO) AOTAutograd runs with plain compilers."""
    overrides = compile_options.resolve(mode, options)
    with compile_options.applied(overrides):
        return _backend(gm, example_inputs, overrides)


def _untraced_backward(compiler: Any) -> Any:
    """`compiler` (a backward compiler, plain or torch's SerializableAOTDispatchCompiler) made
    invisible to Dynamo, with the callable it returns.

    AOTAutograd compiles the backward lazily, inside `loss.backward()`. When that call sits in a
    function the user compiled (a whole training step), the step has a graph break there and its
    nested Python frames still pass through Dynamo's frame hook: without this, Dynamo would trace
    coil's compiler and runtime (with fake tensors) instead of running them. torch's own
    `aot_autograd` backend helper wraps its backward compilers the same way; coil calls
    `aot_module_simplified` directly, so it does it here. On an AOTAutograd cache hit torch
    rewraps the loaded backward itself."""
    def untraced(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
        compiled = torch.compiler.disable(  # type: ignore[no-untyped-call]
            compiler_fn, reason="coil compiles the backward")(gm, example_inputs)
        return torch.compiler.disable(compiled, reason="coil runs the compiled backward")  # type: ignore[no-untyped-call]

    from torch._functorch._aot_autograd.schemas import SerializableAOTDispatchCompiler

    if isinstance(compiler, SerializableAOTDispatchCompiler):
        compiler_fn = compiler.compiler_fn
        compiler.compiler_fn = untraced
        return compiler
    compiler_fn = compiler
    return untraced


def _backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], overrides: Mapping[str, Any]
             ) -> Callable[..., Any]:
    call = BackendCall()
    BACKEND_CALLS.append(call)
    first = len(COMPILED)
    t0 = time.perf_counter()
    attention.register()  # coil::attention exists before a graph that calls it is traced or loaded
    front = frontend_cache.lookup(gm, example_inputs)
    call.frontend_cache = front.status
    call.frontend_s = time.perf_counter() - t0
    if front.status == "off":
        call.frontend_stored = front.reason
        log.info("frontend cache not used: %s", front.reason)
    elif front.entry is not None:
        served = _from_frontend(front.entry, gm, example_inputs)
        call.frontend_s = time.perf_counter() - t0
        if served is not None:
            call.graphs = [g.name for g in COMPILED[first:]]
            return served
        call.frontend_cache = front.status = "miss"
        t0 = time.perf_counter()
    backend_id = getattr(gm, "_backend_id", None)
    captured = fallback.Captured(gm)  # what runs when coil cannot compile one of its graphs
    try:
        gm = run_pre_grad_passes(gm, example_inputs, attention=attention.pre_grad_pass())
    except Exception as e:
        if not knobs.fallback_on_error or fallback.dynamo_handles(e):
            raise
        compiled, call.eager_fallback = fallback.untraced(captured, "pre-grad passes", e, [])
        return compiled
    if backend_id is not None:
        # Dynamo's name for this graph under torch's caching precompile
        # (torch._dynamo.config.caching_precompile): AOTAutograd records the compiled result
        # under it, and Dynamo's saved package refers to it; kept on a module a pass rebuilt
        gm._backend_id = backend_id
    t1 = time.perf_counter()
    call.pre_grad_s = t1 - t0
    unusable = aot_cache.unusable(gm)
    compilers: dict[str, Any] = {}
    for kind in ("forward", "backward", "inference"):
        if unusable is None:
            compilers[kind] = aot_cache.serializable(
                compile_options.scoped(functools.partial(compile_for_aot_cache, kind=kind), overrides))
        else:  # Dynamo guards the inputs (a mismatch recompiles): no second check in the wrapper
            compilers[kind] = compile_options.scoped(
                functools.partial(compile_graph, kind=kind, check_inputs=False), overrides)
    compilers["backward"] = _untraced_backward(compilers["backward"])
    settings: Any = contextlib.nullcontext()
    if unusable is None:
        aot_cache.salt(gm)
        settings = aot_cache.torch_settings()
    else:
        log.info("AOT cache not used: %s", unusable)
    # imported when first needed: a frontend-cache hit does not need its many imports (with
    # backend="coil" by name torch's backend registry imports it anyway)
    from torch._dynamo.utils import counters
    from torch._functorch.aot_autograd import aot_module_simplified

    # torch's own `aot_autograd` backend helper counts its calls here, and DDPOptimizer reads the
    # count to learn that a graph went through AOTAutograd: it then makes the first call of the
    # compiled graph itself, with fake tensors, which is the call AOTAutograd answers with fake
    # outputs while DDPOptimizer compiles (`fakify_first_call`). Uncounted, that first call would
    # be the user's, and would return fake tensors.
    counters["aot_autograd"]["total"] += 1
    failed = False  # not the error itself: its traceback would hold every frame up to the user's
    with (fallback.whole_graph(), settings, aot_cache.watch() as verdict,
          frontend_cache.recording(front.status == "miss") as rec):
        try:
            compiled = aot_module_simplified(
                gm,
                list(example_inputs),
                fw_compiler=compilers["forward"],
                bw_compiler=compilers["backward"],
                inference_compiler=compilers["inference"],
                decompositions=_decompositions(),  # type: ignore[arg-type]  # a Mapping: see lazy_table
                partition_fn=partition,  # torch's min-cut partitioner, then coil's post-processing
                keep_inference_input_mutations=True,
            )
        except fallback.DynamoGraphFallback as e:  # a graph failed to compile (it warned)
            failed = True
            compiled = fallback.dynamo_graph(captured, e, COMPILED[first:])
            call.eager_fallback = str(e.error)
        except Exception as e:  # AOTAutograd failed outside coil's compilers
            if not knobs.fallback_on_error or fallback.dynamo_handles(e):
                raise
            failed = True
            compiled, call.eager_fallback = fallback.untraced(captured, "AOTAutograd", e, COMPILED[first:])
    call.aot_s = time.perf_counter() - t1
    call.aot_cache = verdict.status if unusable is None else "off"
    if call.aot_cache == "bypass":
        log.info("AOT cache: torch bypassed its cache for this graph (its reason is on the "
                 "torch._functorch._aot_autograd.autograd_cache logger at INFO)")
    call.graphs = [g.name for g in COMPILED[first:]]
    for g in COMPILED[first:]:
        if g.aot_cache == "off":
            g.aot_cache = call.aot_cache
        if front.status == "miss":
            g.frontend_cache = "miss"
    if front.status == "miss":
        call.frontend_stored = (frontend_cache.store(front, rec) if not failed
                                else "not stored: the Dynamo graph runs eagerly after a compile error")
    return compiled


def _from_frontend(entry: frontend_cache.Entry, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]
                   ) -> Callable[..., Any] | None:
    """The callable of a frontend-cache hit (coil.backend.caches.frontend_cache), or None when the entry
    does not load (logged at INFO; the caller compiles as on a miss and stores it again)."""
    try:
        cached = graph_cache.parse(entry.text, aot_cache.ENTRY_KEY)
        static = marked_static(gm, example_inputs)
        boxed = load_portable("inference", cached, entry.constants, static, frontend=True)
    except Exception as e:  # a damaged entry (ValueError, LookupError) or anything else: compile instead
        log.info("frontend cache: the entry did not load (%s: %s): compiling", type(e).__name__, e)
        return None
    return frontend_cache.runtime(boxed, torch._C._is_any_autocast_enabled())
