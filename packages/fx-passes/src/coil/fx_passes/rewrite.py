"""Graph-editing helpers shared by the passes: forwarding a node to an equivalent value."""

from __future__ import annotations

from coil.fx_passes.aliasing import input_storages, output_storages, storages_of
from coil.fx_passes.fake_meta import describe_mismatch, refresh_meta, users_to_refresh
from torch.fx import GraphModule, Node

__all__ = ["forward_is_safe", "replace_with_existing"]


def forward_is_safe(gm: GraphModule, node: Node, value: Node) -> bool:
    """Whether every use of ``node`` may read ``value`` instead, as far as aliasing goes.

    ``value`` must already compute the same tensor (the caller proves that). Replacing is safe
    when the metadata (shape, stride, offset, dtype, device) agree and it does not make a graph
    output share storage with a graph input or another output that it did not share before:
    when ``node`` is a fresh buffer that reaches an output, ``value`` must not alias an input
    or an output (so ``clone(x)`` of an input ``x`` that is returned stays).
    """
    nv, vv = node.meta.get("val"), value.meta.get("val")
    if nv is None or vv is None or describe_mismatch(nv, vv) is not None:
        return False
    n_keys, v_keys = storages_of(nv), storages_of(vv)
    if n_keys & v_keys:
        return True  # node is already a view of value: aliasing is unchanged
    if value.op == "placeholder" or (v_keys & input_storages(gm)):
        reaches_output = bool(n_keys & output_storages(gm)) or any(
            u.op == "output" for u in node.users
        )
        if reaches_output:
            return False
    return not (n_keys & output_storages(gm) and v_keys & output_storages(gm))


def replace_with_existing(gm: GraphModule, node: Node, value: Node) -> None:
    """Point every use of ``node`` at ``value``, erase ``node``, refresh the users' meta."""
    users = list(node.users)
    old, new = node.meta.get("val"), value.meta.get("val")
    node.replace_all_uses_with(value)
    gm.graph.erase_node(node)
    refresh_meta(gm, users_to_refresh(users, old, new))
