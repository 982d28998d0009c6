"""What generated wrapper code hands the runtime: one `KernelSpec` per Triton kernel.

Both classes are frozen and validated on construction, and hashable (a spec is a memo key).
Importing this module does not import torch: dtypes are checked lazily, when a TensorArg is built.
"""

from __future__ import annotations

import functools
import keyword
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class TensorArg:
    """A pointer argument whose elements have type `dtype` (a `torch.dtype`)."""

    dtype: torch.dtype

    def __post_init__(self) -> None:
        import torch

        if not isinstance(self.dtype, torch.dtype):
            raise TypeError(f"TensorArg.dtype must be a torch.dtype, got {self.dtype!r}")


@dataclass(frozen=True)
class KernelSpec:
    """One Triton kernel to compile.

    Attributes:
        name: the `@triton.jit` function's name inside `source`.
        source: a whole Python module: imports and one `@triton.jit` function (helpers allowed).
        args: the kernel's positional arguments, in order: `TensorArg` for a pointer, an `int`
            for an integer scalar (an example value: GPUs compile ahead of time for it; Triton
            specialises on 1 and on divisibility by 16, like at any launch).
        constexprs: `tl.constexpr` arguments (block sizes), passed by keyword at every launch.
            Stored as a read-only mapping.
        num_warps: warps per program (a power of two).
        num_stages: software-pipelining stages (>= 1).
        debug: compile and run the kernel in Triton's debug mode, so that its `tl.device_assert`s
            fire (they are compiled out otherwise): on a GPU the launch and the ahead-of-time
            compile pass `debug=True` (and `sanitize_overflow=False`: only the kernel's own asserts
            are checked, not Triton's integer-overflow checks); under the interpreter its debug
            option is switched on around each launch. A failed assert raises on the CPU; on a GPU
            it is a device-side assert, which leaves the CUDA context unusable.

    Raises `ValueError`/`TypeError` on construction when a field is malformed.
    """

    name: str
    source: str
    args: tuple[TensorArg | int, ...]
    constexprs: Mapping[str, int] = field(default_factory=dict)
    num_warps: int = 4
    num_stages: int = 1
    debug: bool = False

    def __post_init__(self) -> None:
        if not self.name.isidentifier() or keyword.iskeyword(self.name):
            raise ValueError(f"KernelSpec.name must be a Python identifier, got {self.name!r}")
        if not isinstance(self.source, str) or not self.source.strip():
            raise ValueError(f"KernelSpec {self.name!r}: source is empty")
        object.__setattr__(self, "args", tuple(self.args))
        for i, arg in enumerate(self.args):
            if isinstance(arg, bool) or not isinstance(arg, TensorArg | int):
                raise TypeError(
                    f"KernelSpec {self.name!r}: args[{i}] must be TensorArg or int, got {arg!r}"
                )
        frozen = dict(self.constexprs)
        for key, value in frozen.items():
            if not isinstance(key, str) or not key.isidentifier():
                raise ValueError(f"KernelSpec {self.name!r}: bad constexpr name {key!r}")
            if not isinstance(value, int):
                raise TypeError(f"KernelSpec {self.name!r}: constexpr {key}={value!r} is not int")
        object.__setattr__(self, "constexprs", MappingProxyType(frozen))
        warps = self.num_warps
        if not isinstance(warps, int) or warps < 1 or warps & (warps - 1):
            raise ValueError(f"KernelSpec {self.name!r}: num_warps={warps!r} is not a power of 2")
        if not isinstance(self.num_stages, int) or self.num_stages < 1:
            raise ValueError(f"KernelSpec {self.name!r}: num_stages={self.num_stages!r} < 1")
        if not isinstance(self.debug, bool):
            raise TypeError(f"KernelSpec {self.name!r}: debug={self.debug!r} is not a bool")

    def key(self) -> tuple[object, ...]:
        """A hashable tuple of every field (constexprs sorted): equal specs, equal keys."""
        return (
            self.name,
            self.source,
            self.args,
            tuple(sorted(self.constexprs.items())),
            self.num_warps,
            self.num_stages,
            self.debug,
        )

    def __hash__(self) -> int:
        return hash(self.key())

    @functools.cached_property
    def code_key(self) -> tuple[object, ...]:
        """`key()` without the name, and with the source's comment lines left out and the
        kernel's own name replaced by a placeholder: what Triton compiles, whatever the kernel is
        called. coil names each copy of a kernel apart (a transformer has one per layer) and heads
        it with a comment naming the FX nodes it fuses; specs with equal code keys compile to the
        same binary, so the runtime compiles one of them (`compile_kernels`) and autotuning tunes
        one (`autotune.problem_key`)."""
        code = "\n".join(line for line in self.source.splitlines() if not line.lstrip().startswith("#"))
        code = re.sub(rf"\b{re.escape(self.name)}\b", "_coil_kernel_", code)
        return (code, self.args, tuple(sorted(self.constexprs.items())), self.num_warps, self.num_stages, self.debug)
