"""coil.triton_codegen: Triton kernel source for coil's kernel groups.

Public API (see README.md): `generate` (one kernel group), `generate_schedule`, `KernelSource`,
`CodegenOptions`, `KernelConfig`, `choose`, `STRATEGIES`, `texpr`; for autotuning `candidates`
(launch configurations worth timing) and `variants` (a kernel under each of them), and
`looped_alternatives` / `other_strategy` (a persistent kernel's loop over r as candidates too),
`reread_alternative` (a persistent kernel reading its rows again after its reductions);
`generate_like` (a group generated again as one of its kernels was, e.g. reading some inputs
through a table of addresses: `generate(..., indirect=..., table=...)`); `OUTER_XBLOCK` (the
outputs one program of an "outer" reduction covers on CUDA, which lowering's split rule takes);
GEMM templates (matmul.py: a matmul group's product with its epilogue as one kernel, which
`generate` writes for such groups): `MatmulConfig`, `MatmulShape`, `matmul_configs`,
`shape_configs`, `with_matmul_config`, `generate_matmul`.
"""

from coil.lowering_ir.printing import texpr
from coil.triton_codegen.config import (
    OUTER_XBLOCK,
    STRATEGIES,
    CodegenOptions,
    KernelConfig,
    candidates,
    choose,
    looped_alternatives,
)
from coil.triton_codegen.kernel import KernelSource, generate
from coil.triton_codegen.kernel_source import MatmulShape
from coil.triton_codegen.matmul import generate_matmul
from coil.triton_codegen.matmul_config import (
    MatmulConfig,
    matmul_configs,
    shape_configs,
    with_matmul_config,
)
from coil.triton_codegen.schedule import generate_schedule
from coil.triton_codegen.variants import generate_like, other_strategy, reread_alternative, variants

__all__ = ["OUTER_XBLOCK", "STRATEGIES", "CodegenOptions", "KernelConfig", "KernelSource", "MatmulConfig", "MatmulShape",
           "candidates", "choose", "generate", "generate_like", "generate_matmul", "generate_schedule",
           "looped_alternatives", "matmul_configs", "other_strategy", "reread_alternative", "shape_configs", "texpr",
           "variants", "with_matmul_config"]
