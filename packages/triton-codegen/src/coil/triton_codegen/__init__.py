"""coil.triton_codegen: Triton kernel source for coil's kernel groups.

Public API (see README.md): `generate`, `generate_scatter`, `generate_schedule`, `KernelSource`,
`CodegenOptions`, `KernelConfig`, `choose`, `STRATEGIES`, `texpr`.
"""

from coil.lowering_ir.printing import texpr
from coil.triton_codegen.config import STRATEGIES, CodegenOptions, KernelConfig, choose
from coil.triton_codegen.kernel import KernelSource, generate
from coil.triton_codegen.scatter import generate_scatter, generate_schedule

__all__ = ["STRATEGIES", "CodegenOptions", "KernelConfig", "KernelSource", "choose", "generate", "generate_scatter", "generate_schedule", "texpr"]
