"""Autotuning of kernels' launch configurations, once per graph at compile time.

`tune_sources` runs between Triton codegen and the wrapper build (COIL_AUTOTUNE, `enabled`). For
each kernel with candidates (`coil.triton_codegen.variants`: the reduction kernels and, on CUDA,
the pointwise ones and the GEMM templates' tiles; the same source under other block sizes and warps; for a persistent kernel
over long rows on CUDA also its group generated as a loop over r,
`coil.triton_codegen.other_strategy`, and, on CUDA, generated to read its rows again after its
last reduction, `coil.triton_codegen.reread_alternative`), it describes one `coil.runtime.autotune.TuningProblem`
(each candidate's KernelSpec and grid at the graph's size hints, the elements of every buffer
the kernel touches, which of them it writes, the reduction length) and lets `coil.runtime.autotune.tune`
compile them in parallel, check each against the default on synthetic inputs, time them and
cache the choice. The returned sources carry the chosen constexprs, warps and grid, so the
wrapper and the specs (and the graph and AOT caches, which store them) are built from the tuned
configuration: a launch does no extra work.

COIL_AUTOTUNE: `auto` (default; also 1/on/true/yes) tunes graphs whose kernels are compiled for a
GPU, never under Triton's interpreter (timings meaningless there); `always` tunes under the
interpreter too (tests); 0/off/false/no never tunes. Either way only kernels whose buffers hold
at least COIL_AUTOTUNE_MIN_BYTES are tuned: tuning every reduction kernel of a model's training
graph adds minutes to a cold compile, while the gains come from the largest kernels. Combo
kernels (coil.scheduler.combo) are never tuned: their reductions are small enough to stay below
the default threshold.
Pointwise kernels and the read-again alternative need COIL_AUTOTUNE_EXTRA_MIN_BYTES, a higher
bar: their gains are small (docs/perf.md), worth their compiles only on the biggest kernels, and
a model has dozens of mid-sized pointwise kernels (e.g. each layer's GELU).

`GraphStats` gets `autotuned` (kernels with candidates whose choice was made or found),
`autotune_switched` (those that left their default), `autotune_cached` (choices found in the
tuning cache: nothing timed) and `autotune_choices` (kernel -> the kept configuration).
COIL_LOGS=autotune logs each kernel's candidates, their times and the choice.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping, Sequence

import sympy
import torch
from coil.backend.config.modes import OFF_WORDS, knob_mode
from coil.backend.debug import logs
from coil.backend.stats import GraphStats
from coil.knobs import knobs
from coil.lowering_ir import Buffer, LoweredGraph
from coil.runtime import KernelSpec, interpreter_enabled
from coil.runtime.autotune import Candidate, TuningProblem, TuningResult, tune
from coil.triton_codegen import KernelSource, other_strategy, reread_alternative, variants

log = logging.getLogger("coil.backend")
_ALIASES = {"1": "auto", "on": "auto", "true": "auto", "yes": "auto", **OFF_WORDS}

SpecsFn = Callable[[list[KernelSource], LoweredGraph], list[KernelSpec]]


def mode() -> str:
    """COIL_AUTOTUNE as "auto", "always" or "off". Raises ValueError for another value."""
    return knob_mode("COIL_AUTOTUNE", knobs.autotune, ("auto", "always", "off"), _ALIASES)


def enabled(device: torch.device) -> bool:
    """Whether graphs on `device` are tuned: "always", or "auto" and compiled (not interpreted)."""
    m = mode()
    return m == "always" or (m == "auto" and device.type == "cuda" and not interpreter_enabled(device))


def tune_sources(sources: list[KernelSource], lowered: LoweredGraph, device: torch.device, target: str,
                 stats: GraphStats, to_specs: SpecsFn,
                 as_loop: Callable[[KernelSource], KernelSource | None] | None = None,
                 as_reread: Callable[[KernelSource], KernelSource | None] | None = None) -> list[KernelSource]:
    """`sources` with each tunable kernel replaced by its fastest correct variant (see the module
    docstring); `to_specs` turns sources into the KernelSpecs the runtime compiles (the backend's
    own, so a chosen candidate's spec equals the one compiled afterwards). `as_loop(ks)`, when
    given, generates a persistent kernel's group again as a loop over r (None: it cannot be):
    `triton_codegen.other_strategy` adds that loop's configurations to the candidates;
    `as_reread(ks)` likewise generates it reading its rows again after its last reduction
    (`triton_codegen.reread_alternative`: one more candidate at the default configuration). Unchanged
    when autotuning is off for `device`, and when tuning itself fails (one WARNING on
    coil.backend): tuning never fails a compile."""
    if not sources or not enabled(device):
        return sources
    hints = lowered.symbol_hints
    bufs = lowered.buffers()
    min_bytes = int(knobs.autotune_min_bytes)
    extra_min_bytes = int(knobs.autotune_extra_min_bytes)
    tuned: list[tuple[int, list[KernelSource]]] = []
    problems: list[TuningProblem] = []
    for i, ks in enumerate(sources):
        if ks.strategy == "combo":
            continue  # one configuration serves its small parts (triton-codegen's combo.py)
        sizes = kernel_sizes(ks, bufs, hints)
        if sizes is None:
            continue  # a size without a hint: keep the default
        extents = sizes[0]
        nbytes = sum(n * bufs[b].layout.dtype.itemsize for n, b in zip(extents, ks.pointer_args, strict=True))
        if nbytes < min_bytes:
            continue  # a small kernel: timing its candidates costs more compile time than it can save
        extra = nbytes >= extra_min_bytes  # pointwise candidates, the read-again alternative
        if ks.strategy == "pointwise" and not extra:
            continue
        # (the alternatives of another text are generated only for kernels that are tuned)
        vs = variants(ks, target, hints) + _generated(
            ks, "loop-over-r", as_loop, functools.partial(other_strategy, target=target, hints=hints))
        if extra:
            vs += _generated(ks, "read-again", as_reread, functools.partial(reread_alternative, target=target))
        problem = problem_of(vs, lowered, to_specs, sizes) if len(vs) >= 2 else None
        if problem is None:
            continue
        problems.append(problem)
        tuned.append((i, vs))
    if not problems:
        return sources
    try:
        results = tune(problems, device)
    except Exception as e:  # tuning must never cost a compile (e.g. out of memory): keep the defaults
        log.warning("coil: autotuning %s failed (%s: %s): keeping the default launch configurations",
                    stats.name, type(e).__name__, e)
        return sources
    out = list(sources)
    report: list[str] = []
    for (i, vs), problem, result in zip(tuned, problems, results, strict=True):
        out[i] = vs[result.choice]
        stats.autotuned += 1
        stats.autotune_switched += result.choice != 0
        stats.autotune_cached += result.origin in ("memo", "disk")
        stats.autotune_choices[vs[0].name] = problem.candidates[result.choice].describe() + (
            "" if result.choice else " (default)")
        report.append(_describe(vs[0], problem, result))
    logs.emit("autotune", f"{stats.name}: autotuning {len(problems)} kernels", "\n".join(report))
    return out


def kernel_sizes(ks: KernelSource, bufs: Mapping[str, Buffer], hints: dict[sympy.Symbol, int]
                 ) -> tuple[list[int], int] | None:
    """At the size hints: the elements of each buffer `ks` touches (its pointer arguments, in
    order) and the elements reduced into each output (a reduction's row, a GEMM template's K,
    `size_args[1]`; 1 for a pointwise kernel); None when a size has no hint."""
    extents = _ints([bufs[b].layout.storage_extent() for b in ks.pointer_args], hints)
    rnumel = _ints([ks.size_args[1]], hints) if "RBLOCK" in ks.constexprs or ks.matmul is not None else [1]
    return None if extents is None or rnumel is None else (extents, rnumel[0])


def problem_of(vs: Sequence[KernelSource], lowered: LoweredGraph, to_specs: SpecsFn,
               sizes: tuple[list[int], int] | None = None) -> TuningProblem | None:
    """The TuningProblem that times `vs` (one kernel's candidates, the default first) at the
    graph's size hints: every buffer the kernel touches by its elements, the buffers it stores
    compared between candidates, its reduction length (`sizes`: `kernel_sizes` of `vs[0]`,
    computed when not given); None when a size has no hint."""
    ks = vs[0]
    hints = lowered.symbol_hints
    sizes = sizes or kernel_sizes(ks, lowered.buffers(), hints)
    grids = _ints([v.grid for v in vs], hints)
    if sizes is None or grids is None:
        return None
    specs = to_specs(list(vs), lowered)
    return TuningProblem(tuple(Candidate(s, (g, 1, 1)) for s, g in zip(specs, grids, strict=True)), tuple(sizes[0]),
                         tuple(j for j, b in enumerate(ks.pointer_args) if b in ks.stores), max(1, sizes[1]))


def _generated(ks: KernelSource, what: str, regenerate: Callable[[KernelSource], KernelSource | None] | None,
               alternatives: Callable[[KernelSource, Callable[[], KernelSource | None]], list[KernelSource]]
               ) -> list[KernelSource]:
    """`alternatives(ks, make)` (`triton_codegen.other_strategy`, `reread_alternative`), with `make()`
    generating `ks`'s group again by `regenerate`; none when there is no `regenerate`, the kernel
    has none, or generating fails (logged at DEBUG, naming `what`: its other candidates are
    still tuned)."""
    if regenerate is None:
        return []
    try:
        return alternatives(ks, lambda: regenerate(ks))
    except Exception as e:
        log.debug("coil: %s has no %s candidates (%s: %s)", ks.name, what, type(e).__name__, e)
        return []


def _ints(exprs: Sequence[object], hints: dict[sympy.Symbol, int]) -> list[int] | None:
    """`exprs` (ints or sympy expressions of graph sizes) at the size hints; None if one is not
    a number there."""
    out = []
    for e in exprs:
        v = sympy.sympify(sympy.sympify(e).xreplace(hints))  # a bare symbol is replaced by a Python int
        if not isinstance(v, sympy.Integer):
            return None
        out.append(int(v))
    return out


def _describe(ks: KernelSource, problem: TuningProblem, result: TuningResult) -> str:
    lines = [f"{ks.name} ({ks.strategy}, {len(problem.candidates)} candidates, {result.origin}):"]
    if result.origin == "untuned":
        return f"{lines[0]} kept the default, which failed: {result.rejected.get(0)}"
    for i, (c, t) in enumerate(zip(problem.candidates, result.times_ms, strict=True)):
        what = (f"rejected ({result.rejected[i]})" if i in result.rejected
                else f"{t:.4f} ms" if t is not None else "not timed")
        mark = " <- chosen" if i == result.choice else ""
        lines.append(f"  {'default ' if i == 0 else ''}{c.describe()}: {what}{mark}")
    return "\n".join(lines)


def describe_results(stats: Sequence[GraphStats]) -> str:
    """Every tuned kernel's choice in `stats`, one line each (bench and demo output)."""
    return "\n".join(f"{s.name}: {k}: {v}" for s in stats for k, v in s.autotune_choices.items())
