"""Errors raised while lowering, naming the FX node and op at fault."""

from __future__ import annotations


class LoweringError(RuntimeError):
    """Lowering of one FX node failed. The message names the stage, node and op."""

    def __init__(self, node: str, op: str, reason: str) -> None:
        super().__init__(f"[lowering] node {node!r} (op {op}): {reason}")
        self.node = node
        self.op = op


class Unsupported(NotImplementedError):
    """A native lowering does not cover this variant; the node falls back to an ATen call."""
