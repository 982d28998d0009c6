"""A pointwise associative scan (``torch.ops.higher_order.associative_scan``) becomes ATen ops.

``torch._higher_order_ops.associative_scan(combine_fn, xs, dim, combine_mode="pointwise")``
stays one higher-order op through Dynamo and AOTAutograd (transformers' Mamba scans its state
with it on CUDA under torch.compile): ``associative_scan(combine_graph, xs, additional_inputs)``
over dim 0 of every ``xs`` (the frontend moves ``dim`` there and flips for ``reverse``), with a
graph of the combine function taking ``(*left, *right, *additional_inputs)``. coil has no scan
kernel for a user's combine function, so the op is expanded into a work-efficient scan of ATen
ops: combine neighbouring pairs, scan that half recursively, combine each odd prefix with the
next even element, interleave. log2(n) levels and fewer than 2n combine calls, every one
pointwise over strided slices, which the scheduler fuses like any pointwise program.

Only scans of a static length are expanded (the recursion unrolls over it). A symbolic length
leaves the op in the graph, an extern the wrapper calls with the combine graph (torch runs it).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

import torch
from coil.fx_passes.fake_meta import refresh_meta, users_to_refresh
from coil.fx_passes.infra import PassResult, Stage, graph_pass
from coil.fx_passes.patterns.rule import trace_function
from torch.fx import GraphModule, Node

__all__ = ["expand_associative_scans", "scan_dim0"]

aten = torch.ops.aten

Combine = Callable[..., Sequence[torch.Tensor]]


def _slice(x: torch.Tensor, start: int, end: int, step: int = 1) -> torch.Tensor:
    out: torch.Tensor = aten.slice.Tensor(x, 0, start, end, step)
    return out


def _interleave(even: torch.Tensor, odd: torch.Tensor) -> torch.Tensor:
    """even[0], odd[0], even[1], odd[1], ... along dim 0; ``even`` has as many rows as ``odd``
    or one more."""
    k = odd.shape[0]
    pairs = aten.cat.default([aten.unsqueeze.default(_slice(even, 0, k), 1), aten.unsqueeze.default(odd, 1)], 1)
    flat: torch.Tensor = aten.view.default(pairs, [2 * k, *odd.shape[1:]])
    if even.shape[0] == k:
        return flat
    out: torch.Tensor = aten.cat.default([flat, _slice(even, k, k + 1)])
    return out


def scan_dim0(combine: Combine, leaves: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """The inclusive scan of ``leaves`` (tensors of one shape) along dim 0 under ``combine``
    (``combine(*left, *right)`` -> one tensor a leaf; associative, pointwise): position i holds
    leaves[0] (+) ... (+) leaves[i]."""
    n = leaves[0].shape[0]
    if n < 2:
        return list(leaves)
    pairs = combine(*[_slice(x, 0, n - 1, 2) for x in leaves], *[_slice(x, 1, n, 2) for x in leaves])
    odd = scan_dim0(combine, list(pairs))  # the prefixes ending at positions 1, 3, 5, ...
    m = (n - 1) // 2  # even positions from 2 on: each is the odd prefix before it (+) itself
    rest = combine(*[_slice(o, 0, m) for o in odd], *[_slice(x, 2, n, 2) for x in leaves]) if m else []
    even = [aten.cat.default([_slice(x, 0, 1), r]) for x, r in zip(leaves, rest, strict=True)] if m else \
        [_slice(x, 0, 1) for x in leaves]
    return [_interleave(e, o) for e, o in zip(even, odd, strict=True)]


def _laid_out_as(x: torch.Tensor, want: torch.Tensor, fresh: bool) -> torch.Tensor:
    """A fresh tensor of ``x``'s values with ``want``'s strides (``want`` dense: the op's results
    are clones): ``x`` itself when it is one already (``fresh``: not an input), else ``x``
    permuted to ``want``'s order of strides, made contiguous, permuted back."""
    if fresh and x.stride() == want.stride():
        return x
    order = sorted(range(want.dim()), key=lambda d: (-want.stride()[d], d))
    back = sorted(range(want.dim()), key=lambda d: order[d])
    dense = aten.clone.default(aten.permute.default(x, order), memory_format=torch.contiguous_format)
    out: torch.Tensor = aten.permute.default(dense, back)
    return out


def _static_length(xs: Sequence[Any]) -> bool:
    vals = [x.meta.get("val") if isinstance(x, Node) else None for x in xs]
    return bool(vals) and all(isinstance(v, torch.Tensor) and v.dim() > 0 and type(v.shape[0]) is int
                              for v in vals)


def _expand(gm: GraphModule, node: Node) -> bool:
    combine_node, xs, extra = node.args
    if not (isinstance(combine_node, Node) and combine_node.op == "get_attr" and isinstance(xs, list | tuple)
            and isinstance(extra, list | tuple) and _static_length(xs)
            and all(isinstance(e, Node) for e in extra)
            and all(u.op == "call_function" and u.target is operator.getitem for u in node.users)):
        return False
    combine_gm = getattr(gm, str(combine_node.target))
    results = list(node.meta["val"])
    n_xs = len(xs)

    def expanded(*flat: torch.Tensor) -> tuple[torch.Tensor, ...]:
        leaves, lifted = flat[:n_xs], flat[n_xs:]

        def combine(*args: torch.Tensor) -> Sequence[torch.Tensor]:
            return list(combine_gm(*args, *lifted))

        # the op's results are laid out like its clones of xs, which users' views rely on
        scanned = scan_dim0(combine, list(leaves))
        return tuple(_laid_out_as(r, want, r is not leaf)
                     for r, want, leaf in zip(scanned, results, leaves, strict=True))

    inputs = [*xs, *extra]
    traced = trace_function(expanded, [n.meta["val"] for n in inputs])
    env: dict[Node, Node] = dict(zip(traced.graph.find_nodes(op="placeholder"), inputs, strict=True))
    graph = gm.graph
    out: Sequence[Node] = ()
    with graph.inserting_before(node):
        for tn in traced.graph.nodes:
            if tn.op == "call_function":
                env[tn] = graph.node_copy(tn, lambda a: env[a])
            elif tn.op == "output":
                out = [env[a] for a in tn.args[0]]
    stale: list[Node] = []  # views of the results now view other nodes: their values follow
    for user in list(node.users):
        new = out[user.args[1]]  # type: ignore[index]
        stale += users_to_refresh(user.users, user.meta.get("val"), new.meta.get("val"))
        user.replace_all_uses_with(new)
        graph.erase_node(user)
    graph.erase_node(node)
    if not combine_node.users:
        graph.erase_node(combine_node)
    refresh_meta(gm, stale)
    return True


@graph_pass("expand_associative_scans", stages=frozenset({Stage.POST_GRAD}))
def expand_associative_scans(gm: GraphModule) -> PassResult:
    """Expand every ``associative_scan`` of a static length into ATen ops (module docstring).

    Stage: post-grad (functional ATen graphs with ``meta["val"]``).

    Returns ``PassResult(gm, modified)``. The expansion computes the same values as the op
    (the combine graph's own ops, applied in an order associativity allows), so results differ
    from the op's eager kernel by rounding only."""
    modified = False
    for node in list(gm.graph.find_nodes(op="call_function", target=torch.ops.higher_order.associative_scan)):
        modified |= _expand(gm, node)
    if modified:
        gm.graph.lint()
        gm.recompile()
    return PassResult(gm, modified)
