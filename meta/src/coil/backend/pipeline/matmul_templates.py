"""Matrix products as generated Triton GEMM kernels with their pointwise epilogue fused in
(COIL_MATMUL_TEMPLATES), the stage after scheduling.

`apply(sched)` returns the schedule to generate code for: unchanged with the knob `off` (every
mm/addmm/bmm/baddbmm an ATen call, cuBLAS on the GPU); with `always`, every candidate of
`coil.scheduler.matmul_candidates` applied: each such extern, and the pointwise kernel after it
when that is a legal epilogue, becomes one kernel group that triton-codegen writes as its GEMM
template (the product stays in registers for the epilogue).
"""

from __future__ import annotations

from coil.knobs import knobs
from coil.scheduler import Schedule, matmul_candidates, output_buffers, with_matmul_templates

MODES = ("off", "always")


def mode() -> str:
    """COIL_MATMUL_TEMPLATES as "off" or "always" (0/false/no count as off). ValueError for
    another value."""
    raw = str(knobs.matmul_templates).strip().lower()
    if raw in ("off", "0", "false", "no"):
        return "off"
    if raw == "always":
        return "always"
    raise ValueError(f"COIL_MATMUL_TEMPLATES={knobs.matmul_templates!r}: expected off or always")


def apply(sched: Schedule) -> Schedule:
    """`sched` with its matrix products as GEMM template groups when the knob says so (module
    docstring); `sched` itself otherwise, or when it has no candidate."""
    if mode() == "off":
        return sched
    chosen = matmul_candidates(sched.steps, output_buffers(sched.graph.outputs))
    return with_matmul_templates(sched, chosen) if chosen else sched
