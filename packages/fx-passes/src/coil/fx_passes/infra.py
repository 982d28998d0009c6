"""Pass infrastructure: stages, results, conditions and the :class:`GraphPass` unit.

A pass is a named, documented function ``GraphModule -> PassResult`` with the stages it is
valid in, preconditions it needs, postconditions it promises, and whether it introduces
mutation (only reinplacing does; it must run last). Passes edit the graph in place and return
``PassResult(gm, modified)``; ``modified`` must be True whenever the graph changed.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field

from torch.fx import GraphModule

__all__ = ["GRAPH_KIND", "Condition", "GraphPass", "PassResult", "Stage", "graph_pass"]

# graph-module meta key: "inference", "forward" or "backward" (an AOTAutograd graph of a
# training step, or of a step without gradients), set by the caller that knows it (coil's
# backend); passes whose best choice differs between training and inference read it, and
# treat a graph without it as of unknown kind
GRAPH_KIND = "coil_graph_kind"


class Stage(enum.Enum):
    """Where in the pipeline a graph is.

    PRE_GRAD: Dynamo's torch-IR graph (may mutate and alias). JOINT: AOTAutograd's joint
    forward+backward graph. POST_GRAD: the forward or backward graph handed to the compiler,
    functional ATen with ``meta["val"]`` on every node.
    """

    PRE_GRAD = "pre_grad"
    JOINT = "joint"
    POST_GRAD = "post_grad"

    @property
    def functional(self) -> bool:
        """Graphs of this stage may not mutate (except the ``copy_`` epilogue)."""
        return self is not Stage.PRE_GRAD


@dataclass(frozen=True)
class PassResult:
    """What a pass returns: the (possibly same) graph module and whether it changed."""

    graph_module: GraphModule
    modified: bool


@dataclass(frozen=True)
class Condition:
    """A named check on a graph: ``check(gm)`` returns ``None`` if it holds, else why not."""

    name: str
    check: Callable[[GraphModule], str | None]


ALL_STAGES = frozenset(Stage)


@dataclass(frozen=True)
class GraphPass:
    """A named graph pass.

    Attributes:
        name: unique name, used in logs and errors.
        fn: the transformation; edits ``gm`` in place and reports whether it changed.
        stages: the stages whose graphs the pass is valid on.
        requires: preconditions, checked before the pass when verifying.
        ensures: postconditions, checked after the pass when verifying.
        introduces_mutation: the pass may create in-place ops (it must run last).
        doc: one-line summary (defaults to the first line of ``fn``'s docstring).
    """

    name: str
    fn: Callable[[GraphModule], PassResult]
    stages: frozenset[Stage] = ALL_STAGES
    requires: tuple[Condition, ...] = ()
    ensures: tuple[Condition, ...] = ()
    introduces_mutation: bool = False
    doc: str = field(default="")

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a pass needs a name")
        if not self.stages:
            raise ValueError(f"pass {self.name!r} is valid in no stage")
        if not self.doc:
            first = (self.fn.__doc__ or "").strip().splitlines()
            object.__setattr__(self, "doc", first[0] if first else "")

    def __call__(self, gm: GraphModule) -> PassResult:
        return self.fn(gm)


def graph_pass(
    name: str,
    *,
    stages: frozenset[Stage] = ALL_STAGES,
    requires: tuple[Condition, ...] = (),
    ensures: tuple[Condition, ...] = (),
    introduces_mutation: bool = False,
) -> Callable[[Callable[[GraphModule], PassResult]], GraphPass]:
    """Decorator turning a ``GraphModule -> PassResult`` function into a :class:`GraphPass`."""

    def wrap(fn: Callable[[GraphModule], PassResult]) -> GraphPass:
        return GraphPass(name, fn, stages, requires, ensures, introduces_mutation)

    return wrap
