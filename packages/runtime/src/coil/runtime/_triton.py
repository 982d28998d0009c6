"""The thin gate: the only place coil.runtime imports triton, on first use, never at import.

Importing `triton.language` here, outside any interpreter switch, keeps Triton's standard library
(tl.zeros, tl.sum, ...) in compiled mode, so GPU kernels keep working in a process that also runs
CPU kernels under the interpreter (see interpreter.py).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from types import ModuleType


@dataclass(frozen=True)
class TritonInfo:
    """The imported triton and what the runtime needs from it."""

    triton: ModuleType
    version: str
    jit_function_type: type  # triton.JITFunction (public in Triton 3.6 and 3.9)


@functools.cache
def load_triton() -> TritonInfo:
    """Import triton (once) and check the public names the runtime uses."""
    import triton
    import triton.language  # compiled-mode standard library (see the module docstring)

    jit_type = getattr(triton, "JITFunction", None)
    if not isinstance(jit_type, type):
        raise ImportError(f"triton {triton.__version__} has no public triton.JITFunction")
    return TritonInfo(triton=triton, version=str(triton.__version__), jit_function_type=jit_type)


@functools.cache
def torch_version() -> str:
    """torch's version string (a cache-key component)."""
    import torch

    return str(torch.__version__)
