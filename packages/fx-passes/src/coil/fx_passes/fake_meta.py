"""FakeTensor metadata: compute, compare and refresh ``node.meta["val"]``.

Passes that edit a graph call :func:`refresh_meta` with the nodes they created or changed; it
re-runs those nodes under the graph's ``FakeTensorMode`` and walks forward to the users whose
inputs' metadata changed, stopping where nothing changes (an incremental fake propagation).
The verifier uses :func:`compute_val` and :func:`describe_mismatch` to compare the stored
``meta["val"]`` with a fresh computation.
"""

from __future__ import annotations

import functools
import heapq
from collections.abc import Iterable
from typing import Any

import torch
from coil.fx_passes.aliasing import storage_key
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.fx import GraphModule, Node
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols, statically_known_true
from torch.utils._pytree import tree_flatten, tree_leaves, tree_map

__all__ = [
    "MissingMetaError",
    "alias_signature",
    "compute_val",
    "describe_mismatch",
    "fake_mode_of",
    "refresh_meta",
    "repair_stale_aliasing",
    "users_to_refresh",
]


class MissingMetaError(ValueError):
    """An input of a node has no ``meta["val"]`` to propagate from."""


def fake_mode_of(gm: GraphModule) -> FakeTensorMode | None:
    """The ``FakeTensorMode`` that owns the graph's ``meta["val"]`` tensors, if any."""
    for node in gm.graph.nodes:
        for leaf in tree_leaves(node.meta.get("val")):
            if isinstance(leaf, FakeTensor):
                return leaf.fake_mode
    return None


def _arg_val(arg: Node, fake_mode: FakeTensorMode) -> Any:
    if "val" in arg.meta:
        return arg.meta["val"]
    if arg.op == "get_attr":
        value = arg.graph.owning_module
        for atom in str(arg.target).split("."):
            value = getattr(value, atom)
        if isinstance(value, torch.Tensor):
            fake = fake_mode.from_tensor(value, static_shapes=True)
            arg.meta["val"] = fake
            return fake
        return value
    raise MissingMetaError(f"node {arg.name!r} has no meta['val']")


def compute_val(node: Node, fake_mode: FakeTensorMode) -> Any:
    """Run ``node`` on its inputs' ``meta["val"]`` under ``fake_mode`` and return the result.

    Raises:
        MissingMetaError: an input has no ``meta["val"]``.
        Exception: whatever the op raises on those inputs (a broken graph).
    """
    if node.op != "call_function":
        raise ValueError(f"compute_val handles call_function nodes, not {node.op}")

    def load(a: Any) -> Any:
        return _arg_val(a, fake_mode) if isinstance(a, Node) else a

    args = tree_map(load, node.args)
    kwargs = tree_map(load, node.kwargs)
    with fake_mode:
        return node.target(*args, **kwargs)  # type: ignore[operator]


def _sym_eq(a: object, b: object) -> bool:
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    if isinstance(a, (torch.SymInt, int)) and isinstance(b, (torch.SymInt, int)):
        if free_unbacked_symbols(a) or free_unbacked_symbols(b):
            return True  # data-dependent sizes get fresh symbols on every propagation
        return bool(statically_known_true(a == b)) or str(a) == str(b)
    return a == b


def _seq_eq(a: Iterable[object], b: Iterable[object]) -> bool:
    la, lb = list(a), list(b)
    return len(la) == len(lb) and all(_sym_eq(x, y) for x, y in zip(la, lb, strict=True))


def describe_mismatch(stored: Any, fresh: Any, *, offsets: bool = True) -> str | None:
    """Why two ``meta["val"]`` values disagree (shape, stride, offset, dtype, device), or None;
    storage offsets not compared when ``offsets`` is False."""
    s_leaves, s_spec = tree_flatten(stored)
    f_leaves, f_spec = tree_flatten(fresh)
    if s_spec != f_spec:
        return f"structure {s_spec} != fresh {f_spec}"
    for i, (s, f) in enumerate(zip(s_leaves, f_leaves, strict=True)):
        where = f"[{i}] " if len(s_leaves) > 1 else ""
        if isinstance(f, torch.Tensor):
            if not isinstance(s, torch.Tensor):
                return f"{where}stored {type(s).__name__}, fresh is a tensor"
            for what, x, y in (
                ("dtype", s.dtype, f.dtype),
                ("device", s.device, f.device),
            ):
                if x != y:
                    return f"{where}{what} {x} != fresh {y}"
            if not _seq_eq(s.shape, f.shape):
                return f"{where}shape {tuple(s.shape)} != fresh {tuple(f.shape)}"
            if s.layout == torch.strided and f.layout == torch.strided:
                if not _seq_eq(s.stride(), f.stride()):
                    return f"{where}stride {s.stride()} != fresh {f.stride()}"
                if offsets and not _sym_eq(s.storage_offset(), f.storage_offset()):
                    return (
                        f"{where}storage offset {s.storage_offset()} != fresh {f.storage_offset()}"
                    )
        elif isinstance(f, (int, float, bool, torch.SymInt, torch.SymFloat, torch.SymBool)):
            if isinstance(s, torch.Tensor):
                return f"{where}stored a tensor, fresh is {type(f).__name__}"
        elif f is None and s is not None:
            return f"{where}stored {type(s).__name__}, fresh is None"
    return None


def alias_signature(node: Node, value: Any) -> frozenset[tuple[int, int]]:
    """Which (output leaf, input leaf) pairs of ``node`` share storage, for result ``value``.

    Input leaves are the flattened ``meta["val"]`` of the node's tensor arguments, in order.
    """
    inputs: list[Any] = []
    for a in tree_leaves((node.args, node.kwargs)):
        if isinstance(a, Node):
            inputs.extend(tree_leaves(a.meta.get("val")))
    in_keys = [storage_key(v) for v in inputs]
    pairs: set[tuple[int, int]] = set()
    for i, out in enumerate(tree_leaves(value)):
        key = storage_key(out)
        if key is None:
            continue
        pairs.update((i, j) for j, k in enumerate(in_keys) if k is not None and k == key)
    return frozenset(pairs)


def _returns_fresh(node: Node) -> bool:
    """True for an ATen op none of whose results aliases an input (a schema fact)."""
    op = node.target
    if node.op != "call_function" or not isinstance(op, torch._ops.OpOverload):
        return False
    schema = op._schema
    return not any(r.alias_info is not None for r in schema.returns) and not any(
        a.alias_info is not None for a in schema.arguments
    )


@functools.cache
def _always_views_first_arg(op: torch._ops.OpOverload) -> bool:
    """The schema's only return shares its alias set with argument 0, without a write, and the
    op has its own kernel: a CompositeImplicitAutograd op with a view schema (``reshape``,
    ``contiguous``) may return a copy instead, depending on its input's strides."""
    schema = op._schema
    if len(schema.returns) != 1 or not schema.arguments:
        return False
    ret, arg = schema.returns[0].alias_info, schema.arguments[0].alias_info
    if ret is None or arg is None or ret.is_write or not ret.before_set or ret.before_set != arg.before_set:
        return False
    name: str = op.name()  # type: ignore[no-untyped-call]
    return not torch._C._dispatch_has_kernel_for_dispatch_key(name, "CompositeImplicitAutograd")


def _plain_view_of_first_arg(node: Node) -> bool:
    """True when ``node`` is a single-result view of its first argument (:func:`_always_views_first_arg`)
    and its stored value shares storage with that argument's stored value.

    Then a fresh propagation aliases the same input (FakeTensor views share their base's
    storage) and the alias signatures of stored and fresh values are equal: the inputs' values
    are the same objects in both, and both outputs live in argument 0's storage. No need to run
    the op under the fake mode to know that its aliasing is not stale.
    """
    op = node.target
    if not isinstance(op, torch._ops.OpOverload) or not node.args or not isinstance(node.args[0], Node):
        return False
    if not _always_views_first_arg(op):
        return False
    out, base = node.meta.get("val"), node.args[0].meta.get("val")
    if not isinstance(out, torch.Tensor) or not isinstance(base, torch.Tensor):
        return False
    key = storage_key(out)
    return key is not None and key == storage_key(base)


def users_to_refresh(users: Iterable[Node], old: Any, new: Any) -> list[Node]:
    """The users that need :func:`refresh_meta` after their input ``old`` became ``new``.

    When ``new`` has ``old``'s metadata (shape, stride, offset, dtype, device: only the storage
    differs), a user whose op returns fresh tensors (its schema has no aliasing) computes the
    same metadata, so only aliasing users (views, ``getitem``, Python calls) are returned;
    otherwise every ``call_function`` user is. The verifier checks this by full propagation.
    """
    calls = [u for u in users if u.op == "call_function"]
    if describe_mismatch(old, new) is not None:
        return calls
    return [u for u in calls if not _returns_fresh(u)]


def refresh_meta(gm: GraphModule, nodes: Iterable[Node]) -> list[Node]:
    """Recompute ``meta["val"]`` for ``nodes`` and, transitively, for affected users.

    A node's stored value is kept (same object, so aliasing through it is preserved) when the
    fresh value has the same metadata and the same aliasing with the node's inputs; otherwise it
    is replaced and the node's users are recomputed in turn.

    Args:
        gm: the graph module that owns the nodes; its fake mode is found from existing vals.
        nodes: nodes created or edited by a pass (``call_function`` nodes; others are skipped).

    Returns:
        The nodes whose ``meta["val"]`` was replaced, in graph order.

    Raises:
        MissingMetaError: the graph has no FakeTensor metadata at all, or an input lacks it.
    """
    fake_mode = fake_mode_of(gm)
    if fake_mode is None:
        raise MissingMetaError("graph has no FakeTensor meta['val'] to propagate from")
    # a worklist in graph order (fx nodes compare by their position): only the dirty nodes and
    # the users of nodes whose value changed are visited, not the whole graph per call
    heap = [n for n in set(nodes) if n.op == "call_function" and n.graph is gm.graph and not n._erased]
    if not heap:
        return []
    heapq.heapify(heap)
    queued = set(heap)
    changed: list[Node] = []
    while heap:
        node = heapq.heappop(heap)
        fresh = compute_val(node, fake_mode)
        old = node.meta.get("val")
        same = (
            "val" in node.meta
            and describe_mismatch(old, fresh) is None
            and alias_signature(node, old) == alias_signature(node, fresh)
        )
        if not same:
            node.meta["val"] = fresh
            changed.append(node)
            for user in node.users:
                if user.op == "call_function" and user not in queued:
                    queued.add(user)
                    heapq.heappush(heap, user)
    return changed


def repair_stale_aliasing(gm: GraphModule) -> list[Node]:
    """Re-derive ``meta["val"]`` of view nodes whose stored value does not alias their input.

    AOTAutograd's common-subexpression elimination merges equal nodes (e.g. two identical
    ``arange`` calls) and points the users of the dropped one at the survivor without
    re-deriving their metadata: a view of the survivor then keeps a FakeTensor that shares
    storage with the dropped node's value. Shapes and strides are right, the aliasing is not,
    which the verifier's ``meta-val`` check rejects and lowering reads as "not a view".

    Only nodes whose op may alias its inputs (schema alias info) and whose stored aliasing
    differs from a fresh propagation are recomputed (a single-result view whose stored value
    already shares its first argument's storage is not re-run: its aliasing cannot differ), then their users as in
    :func:`refresh_meta`. Nodes the fake mode cannot re-run (data-dependent outputs) are skipped.

    Args:
        gm: a graph with FakeTensor ``meta["val"]`` (nothing happens without one).

    Returns:
        The nodes whose ``meta["val"]`` was replaced, in graph order.
    """
    fake_mode = fake_mode_of(gm)
    if fake_mode is None:
        return []
    stale: list[Node] = []
    for node in gm.graph.nodes:
        if node.op != "call_function" or "val" not in node.meta or _returns_fresh(node):
            continue
        if not isinstance(node.target, torch._ops.OpOverload) or _plain_view_of_first_arg(node):
            continue
        try:
            fresh = compute_val(node, fake_mode)
        except Exception:
            continue  # data-dependent or otherwise unpropagatable: leave it to the verifier
        stored = node.meta["val"]
        if describe_mismatch(stored, fresh) is None and alias_signature(node, stored) != alias_signature(node, fresh):
            stale.append(node)
    return refresh_meta(gm, stale) if stale else []
