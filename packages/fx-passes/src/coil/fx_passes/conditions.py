"""Reusable pass pre- and postconditions (see :class:`~coil.fx_passes.infra.Condition`)."""

from __future__ import annotations

from coil.fx_passes.infra import Condition
from coil.fx_passes.ops import is_impure, is_mutating
from torch.fx import GraphModule

__all__ = ["HAS_FAKE_META", "NO_DEAD_CODE", "NO_MUTATION", "TOPOLOGICALLY_SORTED"]


def _has_fake_meta(gm: GraphModule) -> str | None:
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "call_function") and "val" not in node.meta:
            return f"node {node.name!r} has no meta['val']"
    return None


def _topologically_sorted(gm: GraphModule) -> str | None:
    seen: set[object] = set()
    for node in gm.graph.nodes:
        for arg in node.all_input_nodes:
            if arg not in seen:
                return f"node {node.name!r} uses {arg.name!r} before it is defined"
        seen.add(node)
    return None


def _no_dead_code(gm: GraphModule) -> str | None:
    for node in gm.graph.nodes:
        if not node.users and not is_impure(node) and node.op != "get_attr":
            return f"node {node.name!r} is unused and pure"
    return None


def _no_mutation(gm: GraphModule) -> str | None:
    for node in gm.graph.nodes:
        if is_mutating(node):
            return f"node {node.name!r} mutates its input"
    return None


HAS_FAKE_META = Condition("has-fake-meta", _has_fake_meta)
TOPOLOGICALLY_SORTED = Condition("topologically-sorted", _topologically_sorted)
NO_DEAD_CODE = Condition("no-dead-code", _no_dead_code)
NO_MUTATION = Condition("no-mutation-at-all", _no_mutation)
