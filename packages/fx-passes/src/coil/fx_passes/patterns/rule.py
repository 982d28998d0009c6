"""A rewrite rule: a pattern function, a replacement function, example inputs, a check."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.fx import GraphModule, Node
from torch.fx.experimental.proxy_tensor import make_fx

__all__ = ["Match", "Rule", "sentinel", "trace_function"]


def sentinel(index: int) -> float:
    """The float a scalar wildcard takes while a pattern is traced (unlikely in real graphs)."""
    return 0.7071067811865 + 1e-7 * (index + 1) + 1.234e-11


def trace_function(fn: Callable[..., Any], inputs: Sequence[object]) -> GraphModule:
    """Trace ``fn`` to an ATen graph with ``make_fx``.

    Real tensors are traced in a fresh fake mode; FakeTensor inputs (the ``meta["val"]`` of a
    graph) are traced in their own mode, so the result's ``meta["val"]`` belong to that graph.
    """
    if any(isinstance(x, torch._subclasses.fake_tensor.FakeTensor) for x in inputs):
        return make_fx(fn)(*inputs)
    return make_fx(fn, tracing_mode="fake")(*inputs)


@dataclass
class Match:
    """A candidate match of a rule at ``anchor`` (the node computing the pattern's output).

    Attributes:
        anchor: the graph node equal to the pattern's output.
        args: the pattern arguments bound to graph values: a Node for a tensor argument, a
            number for a scalar wildcard.
    """

    anchor: Node
    args: list[object]

    def value(self, i: int) -> Any:
        """``meta["val"]`` of tensor argument ``i`` (or the scalar itself)."""
        a = self.args[i]
        return a.meta.get("val") if isinstance(a, Node) else a


def _always(_: Match) -> bool:
    return True


@dataclass(frozen=True)
class Rule:
    """A rewrite rule; rules are data, kept in a :class:`~coil.fx_passes.patterns.registry.PatternRegistry`.

    Attributes:
        name: unique name.
        pattern: a function of the arguments returning one tensor, written with ``torch`` /
            ``aten`` ops; traced with make_fx to find what to match.
        replacement: a function of the same arguments computing the same value.
        example_inputs: returns example arguments: tensors (shape, dtype and layout should be
            typical; the match is re-traced at the graph's real values anyway) and floats
            (scalar wildcards: any number in that position of the graph matches).
        check: constraints on a candidate (shapes, dtypes); the rule fires only if it is True.
    """

    name: str
    pattern: Callable[..., Any]
    replacement: Callable[..., Any]
    example_inputs: Callable[[], tuple[object, ...]]
    check: Callable[[Match], bool] = _always
    _cache: dict[str, GraphModule] = field(default_factory=dict, compare=False, repr=False)

    def scalar_positions(self) -> list[int]:
        return [i for i, x in enumerate(self.example_inputs()) if isinstance(x, float)]

    def traced_pattern(self) -> GraphModule:
        """The pattern traced at the example inputs (scalars replaced by sentinels); cached."""
        if "pattern" not in self._cache:
            ex = [
                sentinel(i) if isinstance(x, float) else x
                for i, x in enumerate(self.example_inputs())
            ]
            self._cache["pattern"] = trace_function(self.pattern, ex)
        return self._cache["pattern"]
