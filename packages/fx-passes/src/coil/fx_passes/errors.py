"""Errors raised by the pass manager and the invariant verifier."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["InvariantViolation", "PassError"]


def _history(previous: Sequence[str]) -> str:
    return ", ".join(previous) if previous else "(none)"


class PassError(RuntimeError):
    """A pass raised an exception.

    Attributes:
        pass_name: the pass that failed.
        previous_passes: the passes that ran before it, in order.
    """

    def __init__(
        self, pass_name: str, previous_passes: Sequence[str], cause: BaseException
    ) -> None:
        self.pass_name = pass_name
        self.previous_passes = tuple(previous_passes)
        super().__init__(
            f"pass {pass_name!r} failed: {type(cause).__name__}: {cause} "
            f"[passes before it: {_history(previous_passes)}]"
        )


class InvariantViolation(AssertionError):
    """The verifier found a graph that breaks an invariant after a pass.

    Attributes:
        pass_name: the pass after which the invariant broke (``"<input>"`` for the input graph).
        node: the name of the offending node (``""`` when the violation is graph-wide).
        invariant: the invariant's name, one of ``meta-val``, ``input-output-aliasing``,
            ``no-mutation``, ``reinplace-last``, ``graph-lint`` or a pass postcondition.
        previous_passes: the passes that ran before ``pass_name``.
    """

    def __init__(
        self,
        pass_name: str,
        node: str,
        invariant: str,
        detail: str,
        previous_passes: Sequence[str] = (),
    ) -> None:
        self.pass_name = pass_name
        self.node = node
        self.invariant = invariant
        self.detail = detail
        self.previous_passes = tuple(previous_passes)
        where = f" at node {node!r}" if node else ""
        super().__init__(
            f"invariant {invariant!r} violated after pass {pass_name!r}{where}: {detail} "
            f"[passes before it: {_history(previous_passes)}]"
        )
