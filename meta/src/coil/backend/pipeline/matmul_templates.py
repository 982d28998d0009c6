"""Matrix products as generated Triton GEMM kernels with their pointwise epilogue fused in
(COIL_MATMUL_TEMPLATES), the stage after scheduling.

`apply(sched, lowered, device, target, to_specs)` returns the schedule to generate code for. Each
candidate of `coil.scheduler.matmul_candidates` is an mm/addmm/bmm/baddbmm extern (cuBLAS on the
GPU) and, when legal, the pointwise kernel reading its product as its epilogue; taking it makes
them one kernel group that triton-codegen writes as its GEMM template (the product stays in
registers for the epilogue). The knob:

- `off` (the default): no candidate is taken; every product stays an ATen call.
- `always`: every candidate is taken (tests, and forcing the templates on the GPU).
- `auto`: a candidate is taken when it measures faster (`templates_win`): the template at its
  fastest tile configuration (the autotuner's candidates, timed and cached by
  `coil.runtime.autotune.tune`) against the extern call plus the epilogue kernel, both timed on
  synthetic inputs at the graph's size hints (the extern by `coil.runtime.timing.measure_call`).
  The template must beat that by more than MARGIN. Only where autotuning runs
  (`autotune.enabled`: a GPU, or COIL_AUTOTUNE=always); elsewhere `auto` takes none. Measured
  on an H200 (docs/perf.md): the template wins on small products (a 16-row decode step) and
  ties or loses on large ones, where cuBLAS is faster than Triton's tiles.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import sympy
import torch
from coil.backend.config.modes import knob_mode
from coil.backend.pipeline import autotune
from coil.backend.pipeline.autotune import SpecsFn, kernel_sizes, problem_of
from coil.knobs import knobs
from coil.lowering_ir import Buffer, ExternKernel, LoweredGraph, ReinterpretView
from coil.runtime import timing
from coil.runtime.autotune import TuningProblem, tune
from coil.scheduler import (
    KernelGroup,
    MatmulCandidate,
    Schedule,
    matmul_candidates,
    output_buffers,
    with_matmul_templates,
)
from coil.triton_codegen import CodegenOptions, KernelSource, generate, variants

log = logging.getLogger("coil.backend")

MODES = ("off", "always", "auto")
# the template replaces the extern and its epilogue only when faster by more than this fraction:
# a timing median repeats within a few tenths of a percent, and a tie keeps cuBLAS
MARGIN = 0.02


def mode() -> str:
    """COIL_MATMUL_TEMPLATES as "off", "always" or "auto" (0/false/no count as off). ValueError
    for another value."""
    return knob_mode("COIL_MATMUL_TEMPLATES", knobs.matmul_templates, MODES)


def apply(sched: Schedule, lowered: LoweredGraph, device: torch.device, target: str, to_specs: SpecsFn,
          options: CodegenOptions | None = None) -> Schedule:
    """`sched` with the candidates the knob takes (module docstring) as GEMM template groups;
    `sched` itself when it takes none. A timing failure keeps the externs (one WARNING)."""
    m = mode()
    if m == "off" or (m == "auto" and not autotune.enabled(device)):
        return sched
    chosen = matmul_candidates(sched.steps, output_buffers(sched.graph.outputs))
    if m == "auto" and chosen:
        try:
            wins = templates_win(chosen, sched, lowered, device, target, to_specs, options)
        except Exception as e:  # choosing must never cost a compile: the externs are always correct
            log.warning("coil: timing the GEMM templates of %s failed (%s: %s): keeping the ATen calls",
                        sched.graph.name, type(e).__name__, e)
            wins = [False] * len(chosen)
        chosen = [c for c, w in zip(chosen, wins, strict=True) if w]
    return with_matmul_templates(sched, chosen) if chosen else sched


def templates_win(cands: Sequence[MatmulCandidate], sched: Schedule, lowered: LoweredGraph, device: torch.device,
                  target: str, to_specs: SpecsFn, options: CodegenOptions | None = None) -> list[bool]:
    """For each candidate, whether it is faster as its GEMM template (its fastest tile
    configuration) than as its extern plus its epilogue kernel, by more than MARGIN; False when
    a size has no hint. Every time is taken at the graph's size hints on synthetic inputs; the
    kernels of all candidates are compiled and timed in one `tune` call (one parallel batch)."""
    hints = lowered.symbol_hints
    bufs = lowered.buffers()
    own: list[list[TuningProblem]] = []  # per candidate: its template's, then its epilogue's
    for c in cands:
        sources: list[list[KernelSource]] = [variants(generate(c.group, bufs, target, hints=hints, options=options),
                                                      target, hints)]
        if c.epilogue_step is not None:
            epilogue = sched.steps[c.epilogue_step]
            assert isinstance(epilogue, KernelGroup)
            sources.append([generate(epilogue, bufs, target, hints=hints, options=options)])
        problems = [problem_of(vs, lowered, to_specs, kernel_sizes(vs[0], bufs, hints)) for vs in sources]
        own.append([p for p in problems if p is not None] if all(p is not None for p in problems) else [])
    results = iter(tune([p for ps in own for p in ps], device))
    wins: list[bool] = []
    for c, ps in zip(cands, own, strict=True):
        times = [min((t for t in next(results).times_ms if t is not None), default=None) for _ in ps]
        if not ps or any(t is None for t in times):
            wins.append(False)
            continue
        extern = sched.steps[c.extern_step]
        assert isinstance(extern, ExternKernel)
        t_template = float(times[0] or 0.0)
        t_epilogue = float(times[1] or 0.0) if len(times) > 1 else 0.0
        try:
            t_extern = time_extern(extern, hints, device)
        except Exception as e:  # this candidate keeps its extern, which is always correct
            log.warning("coil: timing the ATen call of %s failed (%s: %s): keeping it", c.group.name,
                        type(e).__name__, e)
            wins.append(False)
            continue
        wins.append(t_template < (1 - MARGIN) * (t_extern + t_epilogue))
        log.info("coil: %s: GEMM template %.4f ms against extern %.4f + epilogue %.4f ms: %s", c.group.name,
                 t_template, t_extern, t_epilogue, "template" if wins[-1] else "extern")
    return wins


def time_extern(ext: ExternKernel, hints: dict[sympy.Symbol, int], device: torch.device) -> float:
    """Milliseconds of one call of `ext` (`timing.measure_call`) on synthetic operands: standard
    normal values in tensors of its arguments' layouts at the size hints. Made and called on real
    tensors outside any dispatch mode: a compile runs under AOTAutograd's FakeTensorMode, where
    the call would only be traced (its time the fake dispatch's, whatever the product's size)."""
    from torch.utils._python_dispatch import _disable_current_modes

    with _disable_current_modes(), torch.no_grad():
        return _time_extern(ext, hints, device)


def _time_extern(ext: ExternKernel, hints: dict[sympy.Symbol, int], device: torch.device) -> float:
    gen = torch.Generator(device=device)
    gen.manual_seed(0)

    def tensor(ref: Buffer | ReinterpretView) -> torch.Tensor:
        lay = ref.layout
        size, stride = _at(lay.size, hints), _at(lay.stride, hints)
        extent = int(sympy.sympify(ref.storage.layout.storage_extent()).xreplace(hints))
        base = torch.randn(max(extent, 1), generator=gen, device=device, dtype=torch.float32).to(lay.dtype)
        return base.as_strided(size, stride, int(sympy.sympify(lay.offset).xreplace(hints)))

    def value(x: object) -> object:
        if isinstance(x, Buffer | ReinterpretView):
            return tensor(x)
        if isinstance(x, sympy.Basic):
            return int(x.xreplace(hints))
        return x

    args = [value(a) for a in ext.args]
    kwargs = {k: value(v) for k, v in ext.kwargs.items()}
    return float(timing.measure_call(lambda: ext.kernel(*args, **kwargs), device))


def _at(exprs: Sequence[object], hints: dict[sympy.Symbol, int]) -> list[int]:
    """Sizes or strides at the size hints."""
    return [int(sympy.sympify(e).xreplace(hints)) for e in exprs]
