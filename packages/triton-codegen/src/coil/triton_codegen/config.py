"""Launch configuration (block sizes, warps, the reduction strategy) and codegen options."""

from __future__ import annotations

from dataclasses import dataclass

STRATEGIES = ("auto", "persistent", "looped")


def next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


@dataclass(frozen=True)
class CodegenOptions:
    """Switches of the kernel generator that add checks but never change what a kernel computes.

    Attributes:
        debug_asserts: before every indirect (data-dependent) load and every scatter store, emit
            `tl.device_assert`s that each loaded index lies inside the dimension it indexes and
            that the whole storage index lies inside the buffer (`[0, storage extent)`), lanes
            masked off exempt. A kernel with asserts has `KernelSource.debug` set: it must be
            compiled in Triton's debug mode (`coil.runtime.KernelSpec(debug=True)`), without
            which `device_assert` is compiled out. Slow; for debugging.

    Frozen and validated on construction (a `TypeError` for a non-bool switch).
    """

    debug_asserts: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.debug_asserts, bool):
            raise TypeError(f"CodegenOptions.debug_asserts must be a bool, got {self.debug_asserts!r}")


@dataclass(frozen=True)
class KernelConfig:
    """Block sizes and launch options. `strategy` is "pointwise", "persistent" or "looped"."""

    strategy: str
    xblock: int
    rblock: int
    num_warps: int


def choose(xnumel: int, rnumel: int, is_reduction: bool, target: str, strategy: str = "auto") -> KernelConfig:
    """Pick a configuration. On the interpreter, big blocks (few programs) run fastest.

    On CUDA, rows of up to 16384 elements are reduced persistently (one read of the input;
    measured on the H200 to bring 8192-wide layernorm/softmax/RMSNorm to Inductor's speed).
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"reduction strategy must be one of {STRATEGIES}, not {strategy!r}")
    interp = target != "cuda"
    if not is_reduction:
        cap = 1 << 16 if interp else 1024
        x = min(next_pow2(max(xnumel, 1)), cap)
        return KernelConfig("pointwise", max(x, 16 if not interp else 1), 1, 4 if x >= 512 else 2)
    rmax_persistent = 1 << 14
    persistent = strategy == "persistent" or (strategy == "auto" and rnumel <= rmax_persistent)
    budget = 1 << 16 if interp else 4096
    if persistent:
        r = next_pow2(max(rnumel, 1))
        x = max(1, min(next_pow2(max(xnumel, 1)), budget // r))
        warps = 16 if r * x >= 8192 else 8 if r * x >= 2048 else 4
        return KernelConfig("persistent", x, r, warps)
    r = min(next_pow2(max(rnumel, 1)), 4096 if interp else 1024)
    x = max(1, min(next_pow2(max(xnumel, 1)), budget // r))
    return KernelConfig("looped", x, r, 8 if r * x >= 2048 else 4)
