"""What each compiled graph came to: kernels, fused ops, fallbacks. Read by the demo and tests."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class GraphStats:
    """Facts about one compiled graph."""

    name: str
    fx_nodes: int = 0
    ir_ops: int = 0            # Pointwise + Reduction operations after lowering
    kernels: int = 0           # Triton kernels generated
    externs: int = 0           # extern calls (matmul/conv through ATen)
    # the extern calls by op (`aten.mm.default`: 12): which SDPA kernel a graph calls, if any
    # (on CUDA, attention that SDPA runs on its math path is no SDPA call but its decomposition)
    extern_ops: dict[str, int] = field(default_factory=dict)
    fallbacks: list[str] = field(default_factory=list)  # ATen ops run as fallbacks
    kernel_origins: list[list[str]] = field(default_factory=list)  # FX nodes per kernel
    kernel_sources: dict[str, str] = field(default_factory=dict)
    wrapper_source: str = ""
    reused_buffers: int = 0
    # per arena (COIL_ARENA): its bytes and the live-set lower bound of the buffers packed in it
    arena_bytes: list[tuple[int, int]] = field(default_factory=list)
    planned_peak: tuple[int, int] | None = None  # planner-model peak bytes: fused order, order used
    # bytes of the graph inputs and constants the planner counts live throughout: part of both
    # planned_peak figures (coil.backend.debug.peaks says what the prediction counts)
    planned_inputs: int | None = None
    # the order used in detail (scheduler OrderReport.step_bytes, input_last): bytes of written
    # buffers live at each step, and per graph input some step reads (its position in the boxed
    # arguments, bytes, last step reading it); a call's peak given which inputs it releases
    planned_profile: tuple[list[int], list[tuple[int, int, int]]] | None = None
    # the largest allocated peak of a call over the memory allocated before it (bytes, returned
    # outputs included) among the first calls measured under coil.backend.measure_peaks(True);
    # None: never measured (switch off, CPU, or CUDA-graph replay); `measured_calls` counts them
    measured_peak: int | None = None
    measured_calls: int = 0
    # the planned growth of the measured call with the largest peak, counting the inputs that call
    # released after their last read (nobody else held them: a backward's saved activations), and
    # how many bytes of inputs that was (coil.backend.debug.peaks)
    measured_planned: int | None = None
    measured_released: int = 0
    # set when the graph runs eagerly after a compile error: its own, or (it then says so) that
    # of another graph of its Dynamo graph, which then runs whole (coil.backend.pipeline.fallback)
    eager_fallback: str | None = None
    # whole-graph cache (COIL_GRAPH_CACHE): "hit" (loaded, no pipeline ran), "miss" (compiled and
    # stored), "bypass" (debug output wanted: compiled and stored), "uncacheable", or "off"
    graph_cache: str = "off"
    # torch's AOTAutograd cache (COIL_AOT_CACHE) in the backend call that produced this graph:
    # "hit" (loaded from it: graph_cache is then "hit" too), "miss" (compiled, stored), "bypass"
    # (torch did not use its cache), or "off" (not used, or compile_graph called directly)
    aot_cache: str = "off"
    # coil's frontend cache (COIL_FRONTEND_CACHE) in the backend call that produced this graph:
    # "hit" (loaded from it, no AOTAutograd: graph_cache is then "hit" too), "miss" (looked up,
    # compiled), or "off" (not used, or compile_graph called directly)
    frontend_cache: str = "off"
    # seconds per compile stage, in the order the stages ran (a stage that ran twice is summed)
    stage_times: dict[str, float] = field(default_factory=dict)
    # each graph output's strides as compiled (None: not a tensor, or symbolic); a forward graph
    # reports them to AOTAutograd (saved activations may be channels-last, coil.fx_passes)
    output_strides: list[list[int] | None] | None = None
    # CUDA-graph segments of a graph with uncapturable steps, one line each after its first call:
    # "segment k: captured (n launches)", "...: eager (why)", "...: uncaptured (why)"
    cuda_graph_segments: list[str] = field(default_factory=list)
    # inputs a CUDA graph of this graph uses in place besides its nn.Parameters: the module
    # buffers Dynamo marked static (coil.backend.pipeline.static_inputs); forward and inference graphs
    static_inputs: tuple[int, ...] = ()
    # autotuning (COIL_AUTOTUNE; coil.backend.pipeline.autotune): kernels whose launch configuration was
    # chosen among candidates (timed now or found in the tuning cache), how many of them left
    # their default, how many choices came from the tuning cache (nothing timed), and each tuned
    # kernel's kept configuration ("XBLOCK=.. RBLOCK=.. warps=.. grid=(..)", "(default)" if kept)
    autotuned: int = 0
    autotune_switched: int = 0
    autotune_cached: int = 0
    autotune_choices: dict[str, str] = field(default_factory=dict)

    @property
    def ops_fused(self) -> int:
        return self.ir_ops - self.kernels

    @property
    def planned_growth(self) -> int | None:
        """What the planner predicts a call adds to the memory held before it: the peak of the
        order used less `planned_inputs` (which a caller allocated before the call); None
        without a plan. The figure `measured_peak` is held against."""
        if self.planned_peak is None or self.planned_inputs is None:
            return None
        return self.planned_peak[1] - self.planned_inputs

    @property
    def compile_s(self) -> float:
        """Seconds coil spent compiling this graph (the sum of `stage_times`)."""
        return sum(self.stage_times.values())


def stage_totals(stats: list[GraphStats]) -> dict[str, float]:
    """Seconds per stage summed over `stats`, stages in first-seen order."""
    out: dict[str, float] = {}
    for s in stats:
        for stage, t in s.stage_times.items():
            out[stage] = out.get(stage, 0.0) + t
    return out


def format_stage_times(times: dict[str, float]) -> str:
    """One line: `stage 1.23 s, ...` plus the total."""
    parts = [f"{k} {v:.2f} s" for k, v in times.items()]
    return ", ".join(parts) + f" (total {sum(times.values()):.2f} s)"


@dataclass
class BackendCall:
    """One call of `coil_backend` (one Dynamo graph).

    `aot_s` is the whole AOTAutograd call, which includes compiling the forward or inference
    graph (its own stages are in that graph's GraphStats); a backward graph is compiled later,
    at the first backward, outside this call, unless the AOT cache is used (COIL_AOT_CACHE) or
    COIL_FALLBACK_ON_ERROR is on (the default): then the backward is compiled, or loaded, within
    the call. `eager_fallback` is set when a graph failed to compile and the call's Dynamo graph
    runs eagerly instead (coil.backend.pipeline.fallback).
    """

    pre_grad_s: float = 0.0
    aot_s: float = 0.0
    aot_cache: str = "off"  # torch's AOTAutograd cache: "hit", "miss", "bypass" or "off" (not used)
    # coil's frontend cache (coil.backend.caches.frontend_cache): "hit" (AOTAutograd not called), "miss"
    # or "off"; the seconds of its look-up and load; after a miss "stored" or why not, when off
    # why it was not used
    frontend_cache: str = "off"
    frontend_s: float = 0.0
    frontend_stored: str = ""
    graphs: list[str] = field(default_factory=list)  # graphs compiled during the call
    eager_fallback: str | None = None  # the compile error after which the Dynamo graph runs eagerly


COMPILED: list[GraphStats] = []
BACKEND_CALLS: list[BackendCall] = []


def reset() -> None:
    """Forget recorded stats (tests)."""
    COMPILED.clear()
    BACKEND_CALLS.clear()
