"""Common-subexpression elimination."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import torch
from coil.fx_passes.infra import PassResult, Stage, graph_pass
from coil.fx_passes.ops import is_impure, is_pure_call
from coil.fx_passes.rewrite import forward_is_safe, replace_with_existing
from torch.fx import GraphModule, Node

__all__ = ["common_subexpression_elimination"]


def _key(value: Any) -> Hashable:
    """A hashable key that distinguishes values Python would call equal (1, 1.0, True, -0.0)."""
    if isinstance(value, Node):
        return ("node", value)
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(_key(v) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple(sorted((k, _key(v)) for k, v in value.items())))
    if isinstance(value, float):
        return ("float", repr(value))
    if isinstance(value, (bool, int, str, type(None), torch.dtype, torch.device, torch.layout,
                          torch.memory_format)):  # fmt: skip
        return (type(value).__name__, value)
    return ("object", id(value))  # unknown objects are equal only to themselves


@graph_pass("common_subexpression_elimination", stages=frozenset({Stage.JOINT, Stage.POST_GRAD}))
def common_subexpression_elimination(gm: GraphModule) -> PassResult:
    """Merge pure nodes that compute the same op on the same arguments.

    Stage: joint, post-grad (functional ATen; pre-grad graphs may mutate between two reads).

    Args:
        gm: the graph module, edited in place.

    Returns:
        ``PassResult(gm, modified)``; modified when a node was merged into an earlier one.

    Example::

        before: a = aten.exp(x); b = aten.exp(x); return a + b
        after:  a = aten.exp(x); return a + a

    Soundness: only pure calls (:func:`coil.fx_passes.ops.is_pure_call`) merge: never random
    ops (two ``rand`` calls differ) or mutating ones. Every impure node is a barrier that
    empties the table, so no value read after a mutation merges with one read before it.
    Scalars are keyed with their type (``1``, ``1.0``, ``True`` and ``-0.0``/``0.0`` differ).
    A merge that would make two graph outputs share storage is skipped.
    """
    seen: dict[Hashable, Node] = {}
    modified = False
    for node in list(gm.graph.nodes):
        if is_impure(node):
            seen.clear()
            continue
        if not is_pure_call(node):
            continue
        key = (_key(node.target), _key(node.args), _key(node.kwargs))
        earlier = seen.get(key)
        if earlier is None:
            seen[key] = node
        elif forward_is_safe(gm, node, earlier):
            replace_with_existing(gm, node, earlier)
            modified = True
    return PassResult(gm, modified)
