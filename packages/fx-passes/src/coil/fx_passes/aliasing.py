"""Storage aliasing questions over ``meta["val"]`` FakeTensors.

Two tensors alias when they share a storage (``untyped_storage()``), which is how fake tensors
record views: a view's FakeTensor shares its base's fake storage. Placeholders are compared by
storage and by identity (an output that *is* a placeholder aliases it).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch.fx import GraphModule, Node
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._pytree import tree_leaves

__all__ = [
    "StorageKey",
    "aliases_any",
    "input_output_alias_pairs",
    "input_storages",
    "output_nodes",
    "output_storages",
    "storage_key",
    "storages_of",
]

StorageKey = StorageWeakRef


def storage_key(value: object) -> StorageKey | None:
    """A hashable key for the storage a tensor lives in, or ``None`` for non-tensors."""
    if not isinstance(value, torch.Tensor):
        return None
    try:
        return StorageWeakRef(value.untyped_storage())  # type: ignore[no-untyped-call]
    except Exception:  # sparse, nested or otherwise storage-less tensors
        return None


def storages_of(value: object) -> set[StorageKey]:
    """The storages of every tensor inside ``value`` (a tensor, tuple, list or dict)."""
    keys = (storage_key(leaf) for leaf in tree_leaves(value))
    return {k for k in keys if k is not None}


def _val(node: Node) -> object:
    return node.meta.get("val", node.meta.get("example_value"))


def output_nodes(gm: GraphModule) -> list[Node | None]:
    """The output node's flattened arguments: a Node per graph output, ``None`` for constants."""
    out = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    return [leaf if isinstance(leaf, Node) else None for leaf in tree_leaves(out.args)]


def input_storages(gm: GraphModule) -> set[StorageKey]:
    """Storages of all graph inputs (placeholders)."""
    keys: set[StorageKey] = set()
    for node in gm.graph.find_nodes(op="placeholder"):
        keys |= storages_of(_val(node))
    return keys


def output_storages(gm: GraphModule) -> set[StorageKey]:
    """Storages of all graph outputs."""
    keys: set[StorageKey] = set()
    for node in output_nodes(gm):
        if node is not None:
            keys |= storages_of(_val(node))
    return keys


def input_output_alias_pairs(gm: GraphModule) -> set[tuple[int, int]]:
    """Pairs (placeholder index, output index) whose tensors share storage (or are one node)."""
    placeholders = list(gm.graph.find_nodes(op="placeholder"))
    in_keys = [storages_of(_val(p)) for p in placeholders]
    pairs: set[tuple[int, int]] = set()
    for j, out in enumerate(output_nodes(gm)):
        if out is None:
            continue
        out_keys = storages_of(_val(out))
        for i, ph in enumerate(placeholders):
            if out is ph or (out_keys & in_keys[i]):
                pairs.add((i, j))
    return pairs


def aliases_any(value: object, keys: Iterable[StorageKey]) -> bool:
    """True when a tensor inside ``value`` shares storage with one of ``keys``."""
    return bool(storages_of(value) & set(keys))
