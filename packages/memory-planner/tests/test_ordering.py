"""Ordering: the peak oracle, baselines, and searches against brute force over all orders."""

from __future__ import annotations

import itertools
import time

import pytest
from coil.memory_planner import (
    Buffer,
    Graph,
    GraphError,
    Node,
    beam_order,
    best_order,
    bfs_order,
    dfs_order,
    exact_order,
    improve_order,
    live_bytes_per_step,
    lpmf_order,
    peak_of_order,
)
from coil.memory_planner.orders import Liveness
from hypothesis import given, settings
from hypothesis import strategies as st


def naive_peak(graph: Graph, order: list[int]) -> int:
    """Liveness straight from the rules, step by step, sharing no code with the package."""
    inputs = sum(b.size for b in graph.buffers if b.input)
    peak = inputs
    for k, v in enumerate(order):
        live = inputs
        for b in graph.buffers:
            if b.input:
                continue
            writers = [i for i, n in enumerate(graph.nodes) if b.name in n.writes]
            if not writers:
                continue
            w = order.index(writers[0])
            readers = [order.index(i) for i, n in enumerate(graph.nodes) if b.name in n.reads]
            last = len(order) - 1 if b.output else max([w, *readers])
            if w <= k <= last:
                live += b.size
        peak = max(peak, live)
        del v
    return peak


def all_orders(graph: Graph) -> list[list[int]]:
    return [
        list(p) for p in itertools.permutations(range(len(graph.nodes))) if graph.is_topological(p)
    ]


@st.composite
def graphs(draw: st.DrawFn, max_nodes: int = 6) -> Graph:
    n = draw(st.integers(1, max_nodes))
    buffers = [Buffer("in", draw(st.integers(0, 8)), input=True)]
    nodes = []
    for i in range(n):
        produced = [b.name for b in buffers]
        reads = draw(st.lists(st.sampled_from(produced), max_size=3, unique=True))
        writes = []
        for j in range(draw(st.integers(0, 2))):
            name = f"b{i}_{j}"
            buffers.append(Buffer(name, draw(st.integers(0, 16)), output=draw(st.booleans())))
            writes.append(name)
        nodes.append(Node(f"n{i}", tuple(reads), tuple(writes)))
    # shuffle the listed order (still a valid graph; the baseline may then be non-topological)
    perm = draw(st.permutations(range(n)))
    return Graph(tuple(buffers), tuple(nodes[p] for p in perm))


@settings(max_examples=150, deadline=None)
@given(graphs())
def test_oracles_agree(graph: Graph) -> None:
    lv = Liveness(graph)
    for order in (bfs_order(graph), dfs_order(graph), lpmf_order(graph)):
        assert graph.is_topological(order)
        assert peak_of_order(graph, order) == naive_peak(graph, order) == lv.peak(order)
        assert len(live_bytes_per_step(graph, order)) == len(order)


@settings(max_examples=80, deadline=None)
@given(graphs())
def test_exact_is_optimal_and_best_order_never_worse(graph: Graph) -> None:
    opt = min(naive_peak(graph, o) for o in all_orders(graph))
    res = exact_order(graph, deadline=time.monotonic() + 10)
    assert res is not None
    order, peak = res
    assert graph.is_topological(order)
    assert peak == opt == peak_of_order(graph, order)
    best = best_order(graph, time_limit=1)
    idx = graph.node_index(best.order)
    assert best.peak == peak_of_order(graph, idx) == opt
    assert best.optimal
    assert best.peak <= best.baseline_peak


@settings(max_examples=40, deadline=None)
@given(graphs(max_nodes=8))
def test_beam_and_local_search_give_valid_orders(graph: Graph) -> None:
    res = beam_order(graph, 4, deadline=time.monotonic() + 10)
    assert res is not None
    assert graph.is_topological(res[0]) and res[1] == peak_of_order(graph, res[0])
    start = dfs_order(graph)
    improved, peak = improve_order(graph, start, deadline=time.monotonic() + 2)
    assert graph.is_topological(improved)
    assert peak == peak_of_order(graph, improved) <= peak_of_order(graph, start)


def test_big_graph_beats_baselines_within_budget() -> None:
    # Independent chains, each allocating a big temporary then shrinking: running the chains one
    # after another (the listed order interleaves them) keeps one big temporary live at a time.
    buffers = [Buffer("x", 1, input=True)]
    nodes = []
    for c in range(12):
        buffers += [Buffer(f"big{c}", 100), Buffer(f"small{c}", 1, output=True)]
        nodes.append(Node(f"alloc{c}", ("x",), (f"big{c}",)))
    for c in range(12):
        nodes.append(Node(f"shrink{c}", (f"big{c}",), (f"small{c}",)))
    graph = Graph(tuple(buffers), tuple(nodes))
    res = best_order(graph, time_limit=2)
    base = peak_of_order(graph, list(range(len(nodes))))
    assert res.baseline_peak == base
    assert res.peak == peak_of_order(graph, graph.node_index(res.order))
    assert res.peak <= min(
        peak_of_order(graph, f(graph)) for f in (bfs_order, dfs_order, lpmf_order)
    )
    assert res.peak < base


def test_node_without_writes_and_unread_buffer() -> None:
    g = Graph(
        (Buffer("x", 4, input=True), Buffer("t", 10), Buffer("y", 2, output=True)),
        (Node("a", ("x",), ("t",)), Node("sink", ("x",), ()), Node("b", ("x",), ("y",))),
    )
    # t is never read: live only while a runs
    assert live_bytes_per_step(g, [0, 1, 2]) == [14, 4, 6]
    assert peak_of_order(g, [0, 1, 2]) == 14


@pytest.mark.parametrize(
    ("buffers", "nodes", "match"),
    [
        ((Buffer("a", 1),), (Node("n", ("a",), ("a",)),), "cycle through node .n.: it reads"),
        ((Buffer("a", 1),), (Node("n", (), ("a",)), Node("m", (), ("a",))), "two writers"),
        ((Buffer("a", -1),), (), "negative"),
        ((), (Node("n", ("zz",), ()),), "unknown buffer 'zz'"),
        (
            (Buffer("a", 1), Buffer("b", 1)),
            (Node("p", ("b",), ("a",)), Node("q", ("a",), ("b",))),
            "cycle through node",
        ),
        ((Buffer("a", 1),), (Node("n", ("a",), ()),), "no graph input"),
        ((Buffer("i", 1, input=True),), (Node("n", (), ("i",)),), "writes graph input"),
    ],
)
def test_graph_errors_name_the_culprit(
    buffers: tuple[Buffer, ...], nodes: tuple[Node, ...], match: str
) -> None:
    with pytest.raises(GraphError, match=match):
        Graph(buffers, nodes)
