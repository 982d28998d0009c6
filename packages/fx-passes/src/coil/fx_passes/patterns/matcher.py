"""Matching rules against a graph and rewriting the matches.

Matching has two phases. The *relaxed* phase walks the traced pattern backwards from its
output alongside a graph node, ignoring integer literals (sizes, dims) and copies
(``clone``) that depend on the layout of the example inputs, to bind the pattern's arguments
to graph nodes and scalars. The *exact* phase re-traces the pattern at the bound values (the
graph's own FakeTensors, so the same sizes, strides and decomposition choices) and requires
the graph to contain exactly that subgraph, every literal equal (a layout-keeping ``clone``
in the graph, e.g. eval-mode dropout on torch 2.11, is an identity and is absorbed). Only then is the replacement
traced at the same values, its ``meta["val"]`` taken from that trace, and spliced in.
"""

from __future__ import annotations

from typing import Any

import torch
from coil.fx_passes.aliasing import input_storages, storages_of
from coil.fx_passes.fake_meta import compute_val, describe_mismatch, refresh_meta, users_to_refresh
from coil.fx_passes.infra import GraphPass, PassResult, Stage
from coil.fx_passes.ops import is_impure
from coil.fx_passes.patterns.registry import PatternRegistry
from coil.fx_passes.patterns.rule import Match, Rule, sentinel
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.fx import GraphModule, Node
from torch.utils._pytree import tree_map_only

__all__ = ["apply_rule", "match_rule", "pattern_pass"]

aten = torch.ops.aten
_VIEWS = frozenset({aten.view.default, aten._unsafe_view.default, aten.reshape.default})
_CLONE = aten.clone.default


def _same_target(a: object, b: object) -> bool:
    return a == b or (a in _VIEWS and b in _VIEWS)


def _is_int_like(x: object) -> bool:
    return isinstance(x, (int, torch.SymInt)) and not isinstance(x, bool)


class _Relaxed:
    def __init__(self, rule: Rule, pattern: GraphModule) -> None:
        self.placeholders = list(pattern.graph.find_nodes(op="placeholder"))
        self.scalars = {sentinel(i): i for i in rule.scalar_positions()}
        self.binds: dict[int, object] = {}
        self.seen: dict[Node, Node] = {}

    def node(self, pn: Node, gn: Node) -> bool:
        if pn.op == "placeholder":
            i = self.placeholders.index(pn)
            if i in self.binds:
                return self.binds[i] is gn
            self.binds[i] = gn
            return True
        while gn.target is _CLONE and pn.target is not _CLONE and isinstance(gn.args[0], Node):
            gn = gn.args[0]
        while pn.target is _CLONE and gn.target is not _CLONE and isinstance(pn.args[0], Node):
            return self.node(pn.args[0], gn)
        if pn in self.seen:
            return self.seen[pn] is gn
        if gn.op != "call_function" or not _same_target(pn.target, gn.target):
            return False
        if len(pn.args) != len(gn.args) or set(pn.kwargs) != set(gn.kwargs):
            return False
        self.seen[pn] = gn
        return all(self.arg(a, b) for a, b in zip(pn.args, gn.args, strict=True)) and all(
            self.arg(pn.kwargs[k], gn.kwargs[k]) for k in pn.kwargs
        )

    def arg(self, pa: Any, ga: Any) -> bool:
        if isinstance(pa, Node):
            return isinstance(ga, Node) and self.node(pa, ga)
        if isinstance(pa, (list, tuple)):
            if all(_is_int_like(x) for x in pa) and isinstance(ga, (list, tuple)):
                return all(_is_int_like(x) for x in ga)
            return (
                isinstance(ga, (list, tuple))
                and len(pa) == len(ga)
                and all(self.arg(x, y) for x, y in zip(pa, ga, strict=True))
            )
        if _is_int_like(pa):
            return _is_int_like(ga)
        if isinstance(pa, float) and pa in self.scalars:
            if isinstance(ga, bool) or not isinstance(ga, (int, float)):
                return False
            i = self.scalars[pa]
            if i in self.binds:
                return self.binds[i] == ga
            self.binds[i] = ga
            return True
        return type(pa) is type(ga) and bool(pa == ga)


def _canon_transpose(node: Node) -> tuple[object, ...]:
    val = node.args[0].meta.get("val") if isinstance(node.args[0], Node) else None
    rank = val.dim() if isinstance(val, torch.Tensor) else 0
    dims = sorted(
        int(d) % rank if rank else int(d)  # type: ignore[arg-type]
        for d in node.args[1:3]
    )
    return (node.args[0], *dims)


def _is_plain_clone(node: Node) -> bool:
    """A ``clone`` that keeps the layout (no memory format): an identity on values."""
    return node.target is _CLONE and not node.kwargs and isinstance(node.args[0], Node)


class _Exact:
    def __init__(self, pattern: GraphModule, binds: dict[int, object]) -> None:
        self.placeholders = list(pattern.graph.find_nodes(op="placeholder"))
        self.binds = binds
        self.seen: dict[Node, Node] = {}
        self.skipped: list[Node] = []  # value-identity clones inside the match (eval dropout)

    def node(self, pn: Node, gn: Node) -> bool:
        if pn.op == "placeholder":
            return self.binds.get(self.placeholders.index(pn)) is gn
        if pn.target is not _CLONE and _is_plain_clone(gn):
            self.skipped.append(gn)
            return self.node(pn, gn.args[0])  # type: ignore[arg-type]
        if pn in self.seen:
            return self.seen[pn] is gn
        if gn in self.seen.values():
            return False
        if gn.op != "call_function" or not _same_target(pn.target, gn.target):
            return False
        if len(pn.args) != len(gn.args) or set(pn.kwargs) != set(gn.kwargs):
            return False
        self.seen[pn] = gn
        if pn.target is aten.transpose.int:
            pc, gc = _canon_transpose(pn), _canon_transpose(gn)
            return (
                isinstance(pc[0], Node)
                and isinstance(gc[0], Node)
                and self.node(pc[0], gc[0])
                and pc[1:] == gc[1:]
            )
        return all(self.arg(a, b) for a, b in zip(pn.args, gn.args, strict=True)) and all(
            self.arg(pn.kwargs[k], gn.kwargs[k]) for k in pn.kwargs
        )

    def arg(self, pa: Any, ga: Any) -> bool:
        if isinstance(pa, Node):
            return isinstance(ga, Node) and self.node(pa, ga)
        if isinstance(pa, (list, tuple)):
            return (
                isinstance(ga, (list, tuple))
                and len(pa) == len(ga)
                and all(self.arg(x, y) for x, y in zip(pa, ga, strict=True))
            )
        return type(pa) is type(ga) and bool(pa == ga)


def _output_node(gm: GraphModule) -> Node:
    out = next(n for n in gm.graph.nodes if n.op == "output")
    result = out.args[0]
    if isinstance(result, (tuple, list)):
        result = result[0]
    assert isinstance(result, Node), "a pattern must return one tensor"
    return result


def _values(args: list[object]) -> list[object]:
    return [a.meta["val"] if isinstance(a, Node) else a for a in args]


def _propagate(gm: GraphModule, values: list[object], fake_mode: FakeTensorMode) -> dict[Node, Any]:
    """``meta["val"]`` of every node of a traced function, recomputed at ``values`` in
    ``fake_mode`` (traces are cached across graphs, so their own vals may belong to another)."""
    vals: dict[Node, Any] = {}
    placeholders = iter(values)
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            vals[n] = next(placeholders)
        elif n.op == "call_function":
            args, kwargs = tree_map_only(Node, lambda a: vals[a], (n.args, n.kwargs))
            with fake_mode:
                vals[n] = n.target(*args, **kwargs)
    return vals


def match_rule(rule: Rule, node: Node) -> tuple[Match, list[Node]] | None:
    """Match ``rule`` with ``node`` as the pattern's output.

    Returns:
        The match and the graph nodes it covers (the anchor included), or ``None``.
    """
    pattern = rule.traced_pattern()
    anchor_p = _output_node(pattern)
    if node.op != "call_function" or not _same_target(anchor_p.target, node.target):
        return None
    relaxed = _Relaxed(rule, pattern)
    if not relaxed.node(anchor_p, node):
        return None
    n_args = rule.arity()
    if set(relaxed.binds) != set(range(n_args)):
        return None
    args = [relaxed.binds[i] for i in range(n_args)]
    if any(isinstance(a, Node) and "val" not in a.meta for a in args):
        return None
    match = Match(node, args)
    if not rule.check(match):
        return None
    try:
        exact_pattern = rule.traced_at("pattern", _values(args))
    except Exception:  # the pattern does not apply at these shapes
        return None
    exact = _Exact(exact_pattern, relaxed.binds)
    if not exact.node(_output_node(exact_pattern), node):
        return None
    covered = list(exact.seen.values()) + exact.skipped
    inside = set(covered)
    for g in covered:
        if is_impure(g):
            return None
        if g is not node and any(u not in inside for u in g.users):
            return None  # an intermediate is used outside the pattern
    return match, covered


def apply_rule(gm: GraphModule, rule: Rule, node: Node) -> bool:
    """Rewrite the match of ``rule`` at ``node`` if there is one; True when rewritten."""
    found = match_rule(rule, node)
    if found is None:
        return False
    match, covered = found
    values = _values(match.args)
    fake_mode = next((v.fake_mode for v in values if isinstance(v, FakeTensor)), None)
    if fake_mode is None:
        return False
    try:
        rep = rule.traced_at("replacement", values)
        rep_vals = _propagate(rep, values, fake_mode)
    except Exception:
        return False
    if not rule.accepts(rep):
        return False
    rep_out = _output_node(rep)
    old_val, new_val = node.meta["val"], rep_vals.get(rep_out)
    if not isinstance(new_val, torch.Tensor):
        return False
    why = describe_mismatch(old_val, new_val)
    needs_contiguous = False
    if why is not None:
        same_shape = (old_val.shape, old_val.dtype, old_val.device) == (
            new_val.shape, new_val.dtype, new_val.device,
        )  # fmt: skip
        if not (same_shape and old_val.is_contiguous()):
            return False
        needs_contiguous = True
    in_keys = input_storages(gm)
    if storages_of(new_val) & in_keys and not storages_of(old_val) & in_keys:
        return False
    graph = gm.graph
    env: dict[Node, Node] = {}
    placeholders = list(rep.graph.find_nodes(op="placeholder"))
    with graph.inserting_before(node):
        for i, ph in enumerate(placeholders):
            bound = match.args[i]
            if isinstance(bound, Node):
                env[ph] = bound
        for rn in rep.graph.nodes:
            if rn.op == "call_function":
                env[rn] = graph.node_copy(rn, lambda a: env[a])
                env[rn].meta["val"] = rep_vals[rn]  # this graph's fake mode, not the trace's
        result = env[rep_out]
        if needs_contiguous:
            result = graph.call_function(
                _CLONE, (result,), {"memory_format": torch.contiguous_format}
            )
            result.meta["val"] = compute_val(result, fake_mode)
    users = list(node.users)
    node.replace_all_uses_with(result)
    position = {n: i for i, n in enumerate(graph.nodes)}
    for g in sorted(covered, key=lambda n: -position[n]):
        if not g.users:
            graph.erase_node(g)
    refresh_meta(gm, users_to_refresh(users, old_val, result.meta["val"]))
    return True


def pattern_pass(name: str, registry: PatternRegistry, *, doc: str = "") -> GraphPass:
    """A pass applying every rule of ``registry`` wherever it matches (post-grad and joint)."""

    def run(gm: GraphModule) -> PassResult:
        modified = False
        present = {n.target for n in gm.graph.nodes if n.op == "call_function"}
        for rule in registry:
            if not rule.required_ops <= present:
                continue  # cannot match: no tracing, no walk
            anchor = _output_node(rule.traced_pattern()).target
            targets = _VIEWS if anchor in _VIEWS else frozenset({anchor})
            candidates = [
                n for n in gm.graph.nodes if n.op == "call_function" and n.target in targets
            ]
            live = set(candidates)
            for node in candidates:
                if node in live and apply_rule(gm, rule, node):
                    modified = True
                    live = set(gm.graph.nodes)
        return PassResult(gm, modified)

    run.__doc__ = doc or f"Apply the {len(registry)} rules of {registry!r}."
    return GraphPass(name, run, frozenset({Stage.JOINT, Stage.POST_GRAD}))
