"""A rewrite rule: a pattern function, a replacement function, example inputs, a check."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.fx import GraphModule, Node
from torch.fx.experimental.proxy_tensor import make_fx

__all__ = ["Match", "Rule", "sentinel", "signature", "trace_function"]

_CACHE_LIMIT = 256  # traced graphs kept per rule (pattern and replacement, per signature)


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


def signature(values: Sequence[object]) -> tuple[object, ...] | None:
    """A hashable key of bound pattern arguments: what tracing a rule at them depends on.

    Tensors contribute shape, stride, storage offset, dtype, device and ``requires_grad``;
    scalars their type and value. ``None`` when a size is symbolic (no caching then).
    """
    key: list[object] = []
    for v in values:
        if isinstance(v, torch.Tensor):
            dims = (*v.shape, *v.stride(), v.storage_offset())
            if not all(type(d) is int for d in dims):
                return None
            key.append((tuple(v.shape), v.stride(), v.storage_offset(), v.dtype, str(v.device),
                        v.requires_grad))  # fmt: skip
        elif isinstance(v, (bool, int, float)):
            key.append((type(v), v))
        else:
            return None
    return tuple(key)


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


def _any_replacement(_: GraphModule) -> bool:
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
        required_ops: ops (``OpOverload``) every match contains; a pass skips the rule, without
            tracing or walking, on a graph that lacks one. A prefilter only: leave it empty
            when unsure (a wrong entry only stops the rule from firing; tests check that each
            entry occurs in the traced pattern).
        accepts: a condition on the replacement as traced at the match's values; the rule
            fires only if it is True (a replacement that dispatches to another kernel than the
            one the rule is for, say).
    """

    name: str
    pattern: Callable[..., Any]
    replacement: Callable[..., Any]
    example_inputs: Callable[[], tuple[object, ...]]
    check: Callable[[Match], bool] = _always
    required_ops: frozenset[object] = frozenset()
    accepts: Callable[[GraphModule], bool] = _any_replacement
    _cache: dict[object, object] = field(default_factory=dict, compare=False, repr=False)

    def _examples(self) -> tuple[object, ...]:
        """The example inputs, made once per rule (calling ``example_inputs`` allocates)."""
        if "examples" not in self._cache:
            self._cache["examples"] = tuple(self.example_inputs())
        ex = self._cache["examples"]
        assert isinstance(ex, tuple)
        return ex

    def arity(self) -> int:
        """The number of pattern arguments."""
        return len(self._examples())

    def scalar_positions(self) -> list[int]:
        """Positions of the scalar wildcards (float example inputs)."""
        return [i for i, x in enumerate(self._examples()) if isinstance(x, float)]

    def traced_pattern(self) -> GraphModule:
        """The pattern traced at the example inputs (scalars replaced by sentinels); cached."""
        if "pattern" not in self._cache:
            ex = [
                sentinel(i) if isinstance(x, float) else x for i, x in enumerate(self._examples())
            ]
            self._cache["pattern"] = trace_function(self.pattern, ex)
        gm = self._cache["pattern"]
        assert isinstance(gm, GraphModule)
        return gm

    def traced_at(self, which: str, values: Sequence[object]) -> GraphModule:
        """``pattern`` or ``replacement`` (``which``) traced at ``values``, cached per signature.

        ``values`` are the bound arguments (the graph's FakeTensors and scalars). Tracing is
        keyed by :func:`signature` (shape, stride, offset, dtype, device of every tensor and the
        scalars), so a model whose layers share shapes traces each function once. The cached
        graph is used for its structure only; callers re-derive ``meta["val"]`` in their own
        fake mode. Symbolic shapes are not cached (traced every time).

        Raises:
            Exception: whatever tracing raises (the function does not apply at these values).
        """
        fn = self.pattern if which == "pattern" else self.replacement
        key = signature(values)
        if key is None:
            return trace_function(fn, values)
        cache_key = (which, key)
        if cache_key not in self._cache:
            if len(self._cache) > _CACHE_LIMIT:
                for k in [k for k in self._cache if isinstance(k, tuple)]:
                    del self._cache[k]
            try:
                self._cache[cache_key] = trace_function(fn, values)
            except Exception:
                self._cache[cache_key] = None  # remembered: no traceback keeping fakes alive
                raise
        cached = self._cache[cache_key]
        if cached is None:
            raise ValueError(f"rule {self.name!r}: {which} does not trace at these inputs")
        assert isinstance(cached, GraphModule)
        return cached
