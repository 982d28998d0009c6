"""coil.triton_codegen: Triton kernel source for coil's kernel groups.

Public API (see README.md): `generate`, `generate_scatter`, `generate_schedule`, `KernelSource`,
`CodegenOptions`, `KernelConfig`, `choose`, `STRATEGIES`, `texpr`; for autotuning `candidates`
(launch configurations worth timing) and `variants` (a kernel under each of them).
"""

from coil.lowering_ir.printing import texpr
from coil.triton_codegen.config import STRATEGIES, CodegenOptions, KernelConfig, candidates, choose
from coil.triton_codegen.kernel import KernelSource, generate
from coil.triton_codegen.scatter import generate_scatter, generate_schedule
from coil.triton_codegen.variants import variants

__all__ = ["STRATEGIES", "CodegenOptions", "KernelConfig", "KernelSource", "candidates", "choose", "generate",
           "generate_scatter", "generate_schedule", "texpr", "variants"]
