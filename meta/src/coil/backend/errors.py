"""Compile errors that name the stage (and, where known, the node and op) at fault."""

from __future__ import annotations


class CoilCompileError(RuntimeError):
    """Compiling one graph failed in `stage`."""

    def __init__(self, stage: str, graph: str, cause: BaseException) -> None:
        node = getattr(cause, "node", None)
        where = f" at node {node!r}" if node else ""
        super().__init__(f"coil failed in stage '{stage}' compiling {graph}{where}: {type(cause).__name__}: {cause}")
        self.stage = stage
        self.graph = graph
        self.node = node


class CoilCheckError(RuntimeError):
    """A runtime self-check failed (COIL_CHECK_NAN, COIL_CHECK_LIFETIMES): names graph and culprit."""

    def __init__(self, graph: str, message: str) -> None:
        super().__init__(f"coil check failed in {graph}: {message}")
        self.graph = graph
