"""What each compiled graph came to: kernels, fused ops, fallbacks. Read by the demo and tests."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class GraphStats:
    """Facts about one compiled graph."""

    name: str
    fx_nodes: int = 0
    ir_ops: int = 0            # Pointwise + Reduction operations after lowering
    kernels: int = 0           # Triton kernels generated
    externs: int = 0           # extern calls (matmul/conv through ATen)
    fallbacks: list[str] = field(default_factory=list)  # ATen ops run as fallbacks
    kernel_origins: list[list[str]] = field(default_factory=list)  # FX nodes per kernel
    kernel_sources: dict[str, str] = field(default_factory=dict)
    wrapper_source: str = ""
    reused_buffers: int = 0
    planned_peak: tuple[int, int] | None = None  # planner-model peak bytes: fused order, order used
    eager_fallback: str | None = None  # set when the whole graph ran eagerly after an error

    @property
    def ops_fused(self) -> int:
        return self.ir_ops - self.kernels


COMPILED: list[GraphStats] = []


def reset() -> None:
    """Forget recorded stats (tests)."""
    COMPILED.clear()
