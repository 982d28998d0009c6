"""coil.runtime: compile, cache, load and launch the Triton kernels of coil's generated code.

Generated wrapper code calls `compile_kernels(specs, device)` once per compiled graph, then
`kernels[name]((g0, g1, g2), *args)` on every run. On a GPU, kernels are compiled ahead of time in
parallel (in worker processes, `compile_pool`; `prestart_compile_workers` starts them early,
`prefetch_kernels` queues kernels without waiting); on the CPU they run under Triton's
interpreter. See the package README for the cache
layout and the knobs it reads (declared in `coil.knobs`). GPU launches bind Triton's compiled launcher after the
first launch (`fast_launch`); `CudaGraphRunner`/`cudagraphify` capture a boxed callable into a
CUDA graph (told the graph's facts by a `CaptureSpec` and how to hand out outputs by a
`ReplayPolicy`); `SegmentedRunner` replays a graph's capturable segments and runs the steps between
them eagerly.

Importing this package imports neither torch nor triton: both are imported on first use.
"""

from coil.runtime.call_sites import cudagraphify
from coil.runtime.compile import compile_kernels, prefetch_kernels
from coil.runtime.compile_pool import prestart_compile_workers
from coil.runtime.cudagraph import CudaGraphRunner
from coil.runtime.cudagraph_options import CaptureSpec, ReplayPolicy
from coil.runtime.errors import KernelCompileError
from coil.runtime.interpreter import interpreter_enabled
from coil.runtime.kernel import Kernel
from coil.runtime.segments import SegmentedRunner
from coil.runtime.spec import KernelSpec, TensorArg

__all__ = [
    "CaptureSpec",
    "CudaGraphRunner",
    "Kernel",
    "KernelCompileError",
    "KernelSpec",
    "ReplayPolicy",
    "SegmentedRunner",
    "TensorArg",
    "compile_kernels",
    "cudagraphify",
    "interpreter_enabled",
    "prefetch_kernels",
    "prestart_compile_workers",
]
