"""`generate_schedule`: the kernel sources of a whole schedule, one per kernel group."""

from __future__ import annotations

import sympy
from coil.lowering_ir import Buffer
from coil.scheduler import Schedule
from coil.triton_codegen.config import CodegenOptions
from coil.triton_codegen.kernel import KernelSource, generate


def generate_schedule(sched: Schedule, buffers: dict[str, Buffer], target: str, strategy: str = "auto",
                      hints: dict[sympy.Symbol, int] | None = None,
                      options: CodegenOptions | None = None) -> list[KernelSource]:
    """One kernel per group of `sched.kernel_groups()`, in step order (a Scatter step runs two:
    `<op>_init` and `<op>_scatter`, coil.scheduler's `scatter_groups`).

    `options` (default: `CodegenOptions()`, all off) goes to every kernel (see `generate`).
    """
    return [generate(g, buffers, target, strategy, hints, options) for g in sched.kernel_groups()]
