"""Every knob of coil, declared once: attribute, environment variable, type, default, meaning, owner.

Attribute names are flat and unique across coil (`knobs.fusion`, `knobs.cache_dir`). The owner is
the package that reads the knob; docs/configuration.md is generated from this table
(`python -m coil.knobs --markdown`). A knob whose `env` is "" has no environment variable: only
code sets it (`knobs.override`), for tests. `foreign` knobs are other tools' variables that coil
reads.
"""

from __future__ import annotations

import os
from pathlib import Path

from coil.knobs.knob import AUTO_BOOL, BOOL, COUNT, FLOAT, PATH, STR, Knob, int_at_least
from coil.knobs.registry import Registry

BACKEND = "coil.backend"
RUNTIME = "coil.runtime"
FX_PASSES = "coil.fx_passes"
LOWERING_IR = "coil.lowering_ir"
BENCH = "coil.bench"
OWNERS = (BACKEND, FX_PASSES, LOWERING_IR, RUNTIME, BENCH)
"""The owner packages, in the order docs/configuration.md lists them."""


def _default_threads(registry: Registry) -> int:
    """min(32, the CPUs this process may run on (its affinity mask, else the CPU count)), divided
    among the processes of one host when a launcher says how many there are (torchrun's
    LOCAL_WORLD_SIZE): eight ranks on one host each get an eighth, not 32 workers apiece."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    share = registry.value(Knobs.local_world_size) or 1
    return max(1, min(32, cpus // share))


_THREADS_DOC = "min(32, usable CPUs / LOCAL_WORLD_SIZE)"


class Knobs(Registry):
    """coil's knobs; use the process-wide instance `coil.knobs.knobs`."""

    # --- coil.backend: the compile pipeline ---------------------------------------------------
    fallback_on_error = Knob("COIL_FALLBACK_ON_ERROR", BOOL, True, owner=BACKEND, meaning=(
        "on a compile error, run that graph eagerly with one warning: under torch.compile its "
        "whole Dynamo graph, as captured (a training graph's backward is then compiled with its "
        "forward); 0 raises"))
    fusion = Knob("COIL_FUSION", BOOL, True, owner=BACKEND, meaning=(
        "fuse operations into shared kernels"))
    fusion_visit_order = Knob("COIL_FUSION_VISIT_ORDER", BOOL, True, owner=BACKEND, meaning=(
        "a fusion that does not plan in its members' own loop orders also tries its pointwise "
        "members in the order its reduction visits memory (coil.scheduler visit_order), so a "
        "softmax or norm over a dim that is not the innermost is one kernel"))
    reuse = Knob("COIL_REUSE", BOOL, True, owner=BACKEND, meaning=(
        "a buffer takes a dead buffer's storage when that does not raise the peak (memory "
        "planner, reuse mode)"))
    arena = Knob("COIL_ARENA", BOOL, False, owner=BACKEND, meaning=(
        "with reuse, the buffers a graph's kernels write and nothing outside the call sees live at "
        "offsets the memory planner packed in arenas, one allocation per window of steps, made each "
        "call; off by default: measured, it raised reserved memory and won no time (docs/perf.md, "
        "\"Memory planner\")"))
    reduction_strategy = Knob("COIL_REDUCTION_STRATEGY", STR, "auto", owner=BACKEND, meaning=(
        "auto, persistent, looped or outer: the strategy of every reduction kernel; auto picks one "
        "per kernel (packages/triton-codegen/README.md)"))
    matmul_templates = Knob("COIL_MATMUL_TEMPLATES", STR, "off", owner=BACKEND, meaning=(
        "off, auto or always: whether an mm, addmm, bmm or baddbmm extern runs as a generated "
        "Triton GEMM kernel with the pointwise kernel reading its product fused in as its "
        "epilogue (coil.scheduler matmul, triton-codegen matmul.py): always every one; auto those "
        "timed faster than the ATen call plus the epilogue kernel (where autotuning runs); off "
        "none (ATen, cuBLAS, calls)"))
    attention = Knob("COIL_ATTENTION", STR, "off", owner=BACKEND, meaning=(
        "off, auto or always: whether the pre-grad pass attention_to_op rewrites attention into "
        "coil's attention op (coil::attention, Triton kernels with a registered backward): always "
        "every SDPA call and eager softmax chain it recognises; auto only those SDPA cannot hand "
        "to its flash kernel (a mask or bias tensor, a window, ALiBi, an eager chain); off none"))
    order_time = Knob("COIL_ORDER_TIME", FLOAT, 0.5, owner=BACKEND, meaning=(
        "seconds the memory planner may search for a lower-peak order of the fused steps (0: keep "
        "the fused order)"))
    autotune = Knob("COIL_AUTOTUNE", STR, "auto", owner=BACKEND, meaning=(
        "auto (or 1): time each large kernel's candidate launch configurations once at compile time "
        "on a GPU and keep the fastest whose outputs match the default's (cached in "
        "<cache_dir>/autotune/); always: under Triton's interpreter too (tests); 0: off"))
    autotune_min_bytes = Knob("COIL_AUTOTUNE_MIN_BYTES", int_at_least(), 32 << 20, owner=BACKEND, meaning=(
        "autotune only kernels whose buffers hold at least this many bytes: a small kernel's "
        "tuning costs more compile time than it can save"))
    autotune_extra_min_bytes = Knob("COIL_AUTOTUNE_EXTRA_MIN_BYTES", int_at_least(), 256 << 20, owner=BACKEND,
                                    meaning=(
        "pointwise kernels' candidates and persistent reductions' read-again variant only for "
        "kernels whose buffers hold at least this many bytes, where their gain pays for their compiles"))
    cuda_graphs = Knob("COIL_CUDA_GRAPHS", BOOL, True, owner=BACKEND, meaning=(
        "replay inference graphs as CUDA graphs (CUDA, static shapes; steps a CUDA graph cannot "
        "capture run eagerly between captured segments; a failed capture runs uncaptured with one "
        "warning)"))
    cuda_graphs_training = Knob("COIL_CUDA_GRAPHS_TRAINING", BOOL, True, owner=BACKEND, meaning=(
        "also replay forward and backward graphs as CUDA graphs (needs cuda_graphs); a call whose "
        "outputs would overwrite a tensor still referenced runs uncaptured"))
    cuda_graph_lazy_clones = Knob("COIL_CUDA_GRAPH_LAZY_CLONES", BOOL, True, owner=BACKEND, meaning=(
        "inference CUDA graphs hand their outputs out uncloned and copy one away before the next "
        "replay only while the caller still holds it (coil.runtime.lazy_outputs); 0: clone every "
        "output after every replay"))
    recompute_param_casts = Knob("COIL_RECOMPUTE_PARAM_CASTS", BOOL, True, owner=BACKEND, meaning=(
        "training graphs save a parameter instead of its dtype cast (autocast's weight copies of "
        "1 MiB or more) and the backward recomputes the cast before its first use, instead of "
        "holding every layer's copy from the forward on"))
    indirect_inputs = Knob("COIL_INDIRECT_INPUTS", STR, "auto", owner=BACKEND, meaning=(
        "auto, always or 0: a backward graph's tangents of 1 MiB or more that only Triton kernels "
        "read are read at the caller's address through a pointer table instead of being copied in; "
        "auto: backward graphs replayed as CUDA graphs; always: every static-shape backward graph "
        "(tests on the CPU)"))
    cuda_graph_segments_uncaptured = Knob("", BOOL, False, owner=BACKEND, meaning=(
        "run a segmented graph's CUDA-graph segments one by one without capturing them, on any "
        "device (tests of the segment split on the CPU)"))
    graph_cache = Knob("COIL_GRAPH_CACHE", BOOL, True, owner=BACKEND, meaning=(
        "reuse whole compiled graphs from <cache_dir>/graphs/ (key: graph, input metadata, "
        "knobs, versions); the lookup is skipped while debug_dir or a pipeline logs artefact is "
        "set, and check_lifetimes neither looks up nor stores"))
    aot_cache = Knob("COIL_AOT_CACHE", BOOL, True, owner=BACKEND, meaning=(
        "warm starts through torch's AOTAutograd cache (<TORCHINDUCTOR_CACHE_DIR>/aotautograd/), "
        "skipping AOTAutograd and coil's pipeline on a hit; needs graph_cache; a training graph's "
        "backward is then compiled with its forward"))
    frontend_cache = Knob("COIL_FRONTEND_CACHE", BOOL, True, owner=BACKEND, meaning=(
        "serve a compiled inference graph keyed on the Dynamo graph itself from "
        "<cache_dir>/frontend/, without AOTAutograd or its imports; needs graph_cache"))
    prehash = Knob("COIL_PREHASH", BOOL, True, owner=BACKEND, meaning=(
        "on importing coil.backend, hash torch's and Triton's sources (their caches' keys) on a "
        "daemon thread, overlapping the model's set-up and Dynamo's tracing; changes no result"))
    # --- coil.backend: debugging (docs/debugging.md) ------------------------------------------
    logs = Knob("COIL_LOGS", STR, "", owner=BACKEND, meaning=(
        "comma list of artefacts logged at INFO on logger coil.<artefact>: graph, fusion, kernels, "
        "wrapper, memory_plan, compile_time, autotune, or all"))
    debug_dir = Knob("COIL_DEBUG_DIR", STR, "", owner=BACKEND, meaning=(
        "write each compiled graph's artefacts and a repro.py to <dir>/<graph name>/"))
    progress = Knob("COIL_PROGRESS", BOOL, True, owner=BACKEND, meaning=(
        "progress bar while kernels compile (on a TTY, with tqdm installed)"))
    check_nan = Knob("COIL_CHECK_NAN", BOOL, False, owner=BACKEND, meaning=(
        "raise CoilCheckError when a graph output holds NaN or Inf"))
    check_lifetimes = Knob("COIL_CHECK_LIFETIMES", BOOL, False, owner=BACKEND, meaning=(
        "track every allocation and free at run time and check them against the memory plan"))
    debug_asserts = Knob("COIL_DEBUG_ASSERTS", BOOL, False, owner=BACKEND, meaning=(
        "bounds-check every data-dependent load and scatter store inside kernels (Triton "
        "device_assert, kernels compiled in debug mode)"))
    check_inputs = Knob("COIL_CHECK_INPUTS", BOOL, False, owner=BACKEND, meaning=(
        "check each input's shape, strides, dtype and device in the wrapper also under Dynamo "
        "(compile_graph called directly always checks)"))

    # --- coil.fx_passes --------------------------------------------------------------------
    verify = Knob("COIL_VERIFY", BOOL, False, owner=FX_PASSES, meaning=(
        "check the graph invariants after every pass (on in the test suites)"))
    reinplace = Knob("COIL_REINPLACE", BOOL, False, owner=FX_PASSES, meaning=(
        "end the post-grad pipeline with the reinplacing pass (it introduces mutation: only for "
        "a lowering that handles it)"))
    pad_mm = Knob("COIL_PAD_MM", BOOL, True, owner=FX_PASSES, meaning=(
        "pad large CUDA matmuls whose rows are not 16-byte aligned (coil.fx_passes.passes.pad_mm)"))
    channels_last = Knob("COIL_CHANNELS_LAST", AUTO_BOOL, None, owner=FX_PASSES, meaning=(
        "channels-last layouts for convolution graphs: auto on CUDA graphs whose 4-D convolutions "
        "run in bf16/fp16; 1 on every device and floating dtype; 0 never"))

    # --- coil.lowering_ir ------------------------------------------------------------------
    split_reduction_min = Knob("COIL_SPLIT_REDUCTION_MIN", int_at_least(), 4096, owner=LOWERING_IR, meaning=(
        "the least work per program (row length x outputs per program) for which a reduction "
        "with too few output programs is split into partials and their reduction "
        "(packages/lowering-ir/README.md); tests lower it to split small tensors"))
    inline = Knob("COIL_INLINE", BOOL, True, owner=LOWERING_IR, meaning=(
        "substitute cheap pointwise results read at another index (gathers, shifted, masked or "
        "transposed reads) into their readers instead of materialising them"))

    # --- coil.runtime ----------------------------------------------------------------------
    cache_dir = Knob("COIL_CACHE_DIR", PATH, lambda _r: Path.home() / ".cache" / "coil", owner=RUNTIME,
                     default_doc="~/.cache/coil", meaning=(
        "root of coil's disk cache (kernels, graphs, autotuning choices)"))
    compile_workers = Knob("COIL_COMPILE_WORKERS", int_at_least(0), _default_threads, owner=RUNTIME,
                           default_doc=_THREADS_DOC, meaning=(
        "worker processes compiling GPU kernels (0: none, compile on threads of this process)"))
    compile_threads = Knob("COIL_COMPILE_THREADS", int_at_least(1), _default_threads, owner=RUNTIME,
                           default_doc=_THREADS_DOC, meaning=(
        "threads compiling GPU kernels ahead of time when compile workers are off (1: serial)"))
    aot_compile = Knob("", BOOL, True, owner=RUNTIME, meaning=(
        "compile GPU kernels in compile_kernels, ahead of their first launch (off: at first "
        "launch; tests of that path)"))
    fast_launch = Knob("COIL_FAST_LAUNCH", BOOL, True, owner=RUNTIME, meaning=(
        "launch GPU kernels through Triton's bound launcher, skipping JITFunction.run (read when a "
        "Kernel is created)"))
    graph_pool_expandable = Knob("COIL_GRAPH_POOL_EXPANDABLE", BOOL, True, owner=RUNTIME, meaning=(
        "create the CUDA-graph pool's segments expandable, so captures share one growing segment"))
    triton_interpret = Knob("TRITON_INTERPRET", BOOL, False, owner=RUNTIME, foreign=True, meaning=(
        "Triton's switch: every kernel runs under Triton's interpreter (read here without "
        "importing triton)"))
    local_world_size = Knob("LOCAL_WORLD_SIZE", COUNT, None, owner=RUNTIME, foreign=True,
                            default_doc="(unset)", meaning=(
        "processes on this host (torchrun); the compile parallelism defaults share the CPUs among them"))
    alloc_conf = Knob("PYTORCH_ALLOC_CONF", STR, "", owner=RUNTIME, foreign=True, meaning=(
        "PyTorch's allocator settings: whether segments are expandable, where torch cannot say"))
    cuda_alloc_conf = Knob("PYTORCH_CUDA_ALLOC_CONF", STR, "", owner=RUNTIME, foreign=True, meaning=(
        "PyTorch's older name of PYTORCH_ALLOC_CONF, read when that is unset or empty"))

    # --- coil.bench: set by `coil bench` for its model processes ----------------------------
    bench_precompile = Knob("COIL_BENCH_PRECOMPILE", BOOL, False, owner=BENCH, meaning=(
        "first-call processes run under torch's caching precompile (`coil bench --precompile`)"))
    bench_warm_runs = Knob("COIL_BENCH_WARM_RUNS", int_at_least(1, empty=3, expected="a positive integer"), 3,
                           owner=BENCH, meaning=(
        "warm-start processes per compiled mode of a model case, whose median is reported "
        "(`coil bench --warm-runs`)"))
    inductor_cache_dir = Knob("TORCHINDUCTOR_CACHE_DIR", STR, "", owner=BENCH, foreign=True, meaning=(
        "Inductor's and AOTAutograd's cache folder; `coil bench` gives each measured mode fresh ones"))
    triton_cache_dir = Knob("TRITON_CACHE_DIR", STR, "", owner=BENCH, foreign=True, meaning=(
        "Triton's cache folder; `coil bench` gives each measured mode a fresh one"))


knobs = Knobs()
"""The process-wide registry: read `knobs.<name>`, override with `with knobs.override(...)`."""

KNOBS = Knobs.declared()
"""Every declaration, by attribute name, in declaration order (for options, cache keys and docs)."""
