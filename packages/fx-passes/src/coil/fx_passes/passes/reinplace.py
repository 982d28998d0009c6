"""Reinplacing: functional pointwise ops into their in-place forms (runs last)."""

from __future__ import annotations

import torch
from coil.fx_passes.aliasing import StorageKey, input_storages, output_storages, storage_key
from coil.fx_passes.fake_meta import compute_val, describe_mismatch, fake_mode_of, refresh_meta
from coil.fx_passes.infra import PassResult, Stage, graph_pass
from coil.fx_passes.ops import is_pointwise, is_random, overload_of
from torch.fx import GraphModule, Node

__all__ = ["inplace_variant", "reinplace"]


def inplace_variant(op: torch._ops.OpOverload) -> torch._ops.OpOverload | None:
    """``aten.add.Tensor`` -> ``aten.add_.Tensor`` (same overload, first argument written)."""
    packet = getattr(torch.ops.aten, op.overloadpacket.__name__ + "_", None)
    variant = getattr(packet, op._overloadname, None) if packet is not None else None
    if not isinstance(variant, torch._ops.OpOverload):
        return None
    args = variant._schema.arguments
    if not args or args[0].alias_info is None or not args[0].alias_info.is_write:
        return None
    return variant


def _storage_users(gm: GraphModule) -> tuple[dict[Node, int], dict[StorageKey, list[Node]]]:
    position = {n: i for i, n in enumerate(gm.graph.nodes)}
    by_storage: dict[StorageKey, list[Node]] = {}
    for n in gm.graph.nodes:
        key = storage_key(n.meta.get("val"))
        if key is not None:
            by_storage.setdefault(key, []).append(n)
    return position, by_storage


def _try(gm: GraphModule, node: Node, protected: set[StorageKey]) -> bool:
    op = overload_of(node)
    if op is None or not is_pointwise(node) or is_random(node):
        return False
    variant = inplace_variant(op)
    buf = node.args[0] if node.args else None
    if variant is None or not isinstance(buf, Node) or buf.op == "placeholder":
        return False
    bv, nv = buf.meta.get("val"), node.meta.get("val")
    if not isinstance(bv, torch.Tensor) or not isinstance(nv, torch.Tensor):
        return False
    if describe_mismatch(bv, nv) is not None:
        return False  # broadcasting or promotion: the result does not fit the buffer
    key = storage_key(bv)
    if key is None or key in protected:
        return False
    position, by_storage = _storage_users(gm)
    here = position[node]
    for alias in by_storage.get(key, []):
        for user in alias.users:
            if user is not node and position[user] >= here:
                return False  # a later read of the buffer (through some view) exists
    if any(a is not buf and storage_key(a.meta.get("val")) == key for a in node.all_input_nodes):
        return False  # another operand is a view of the buffer being written
    fake_mode = fake_mode_of(gm)
    assert fake_mode is not None
    node.target = variant
    node.meta["val"] = compute_val(node, fake_mode)
    refresh_meta(gm, [u for u in node.users if u.op == "call_function"])
    return True


@graph_pass(
    "reinplace",
    stages=frozenset({Stage.POST_GRAD}),
    introduces_mutation=True,
)
def reinplace(gm: GraphModule) -> PassResult:
    """Turn ``y = op(x, ...)`` into ``y = op_(x, ...)`` where nothing reads ``x`` afterwards.

    Stage: post-grad, last (the only pass that introduces mutation; off by default in the
    backend: ``COIL_REINPLACE=1``).

    Args:
        gm: the graph module, edited in place.

    Returns:
        ``PassResult(gm, modified)``. Each rewritten node's ``meta["val"]`` is its buffer's.

    Example::

        before: a = exp(x); b = add(a, 1); c = mul(b, 2); return c
        after:  a = exp(x); b = add_(a, 1); c = mul_(b, 2); return c

    Soundness: only pointwise, non-random ops with an in-place variant, whose first argument
    has exactly the result's shape, strides and dtype; the buffer is no graph input and shares
    no storage with an input or output; no node aliasing the buffer (any view of it, or its
    base) is used after the op, and no other operand views it.
    """
    protected = input_storages(gm) | output_storages(gm)
    modified = False
    for node in list(gm.graph.nodes):
        if node.op == "call_function" and _try(gm, node, protected):
            modified = True
    return PassResult(gm, modified)
