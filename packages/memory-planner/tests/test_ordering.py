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
from coil.memory_planner.bounds import certified_optimal, forced_live_bytes
from coil.memory_planner.local_search import _Profile, _Static
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


def naive_lpmf(graph: Graph) -> list[int]:
    """LPMF from its definition with liveness straight from the rules (quadratic, no shared code):
    among the ready nodes, the lowest (bytes while it runs, bytes after it, index)."""
    inputs = sum(b.size for b in graph.buffers if b.input)
    writer = {w: i for i, n in enumerate(graph.nodes) for w in n.writes}
    readers = {b.name: {i for i, n in enumerate(graph.nodes) if b.name in n.reads} for b in graph.buffers}
    done: list[int] = []

    def live(ran: set[int], running: int | None) -> int:
        total = inputs
        for b in graph.buffers:
            if b.input or b.name not in writer:
                continue
            w = writer[b.name]
            if w == running or (w in ran and (b.output or readers[b.name] - ran)):
                total += b.size
        return total

    while len(done) < len(graph.nodes):
        ran = set(done)
        ready = [
            v
            for v in range(len(graph.nodes))
            if v not in ran and all(p in ran for p in graph.preds[v])
        ]
        v = min(ready, key=lambda u: (live(ran, u), live(ran | {u}, None), u))
        done.append(v)
    return done


@settings(max_examples=150, deadline=None)
@given(graphs(max_nodes=9))
def test_lpmf_matches_its_definition(graph: Graph) -> None:
    assert lpmf_order(graph) == naive_lpmf(graph)


@settings(max_examples=120, deadline=None)
@given(graphs(max_nodes=8), st.booleans())
def test_local_search_prices_every_move_exactly(graph: Graph, from_dfs: bool) -> None:
    """The incremental pricing of a move (slide left/right) against the oracle, every node."""
    order = dfs_order(graph) if from_dfs else lpmf_order(graph)
    prof = _Profile(_Static(graph), order)
    current = (prof.peak, prof.peak_count)
    steps = live_bytes_per_step(graph, order)
    assert current == (peak_of_order(graph, order), steps.count(prof.peak))
    for v in range(len(graph.nodes)):
        k = prof.pos[v]
        for slide, side in ((prof.slide_left, -1), (prof.slide_right, 1)):
            res = slide(v)
            brute = []
            for j in range(len(order)):
                if (j - k) * side <= 0:
                    continue
                cand = prof.moved(v, j)
                if not graph.is_topological(cand):
                    continue
                peak = peak_of_order(graph, cand)
                cnt = live_bytes_per_step(graph, cand).count(peak) if peak == current[0] else 0
                brute.append(((peak, cnt), j))
            not_worse = [s for s, _j in brute if s[0] <= current[0]]
            if res is None:
                assert all(s >= current for s, _j in brute)
            else:
                assert res[0] == min(not_worse)
                moved = prof.moved(v, res[1])
                assert graph.is_topological(moved) and peak_of_order(graph, moved) == res[0][0]


def training_like(layers: int, width: int = 3) -> Graph:
    """A forward/backward-shaped graph: each layer saves activations the backward reads, with
    temporaries and weight gradients whose position is free (node count ~ 6 x layers x width)."""
    buffers = [Buffer("x", 64, input=True), Buffer("dy", 64, input=True)]
    nodes = []
    acts = ["x"]
    for i in range(layers):
        buffers += [Buffer(f"a{i}", 64 + (i % 5) * 8), Buffer(f"t{i}", 200)]
        buffers += [Buffer(f"s{i}_{k}", 16 + k) for k in range(width)]
        nodes.append(Node(f"f{i}", (acts[-1],), (f"t{i}", *(f"s{i}_{k}" for k in range(width)))))
        nodes.append(Node(f"g{i}", (f"t{i}",), (f"a{i}",)))
        acts.append(f"a{i}")
    grad = "dy"
    for i in reversed(range(layers)):
        buffers += [Buffer(f"d{i}", 64), Buffer(f"w{i}", 32, output=True)]
        saved = tuple(f"s{i}_{k}" for k in range(width))
        nodes.append(Node(f"b{i}", (grad, acts[i + 1], *saved[:1]), (f"d{i}",)))
        nodes.append(Node(f"wg{i}", (grad, *saved[1:]), (f"w{i}",)))
        grad = f"d{i}"
    return Graph(tuple(buffers), tuple(nodes))


def test_searches_scale_to_large_graphs() -> None:
    """Beam search and local search on ~1600 nodes stay within their budgets and stay valid."""
    graph = training_like(400)
    n = len(graph.nodes)
    assert n == 1600
    t0 = time.monotonic()
    res = beam_order(graph, 4, deadline=time.monotonic() + 60)
    assert res is not None and time.monotonic() - t0 < 30
    assert graph.is_topological(res[0]) and res[1] == peak_of_order(graph, res[0])
    start = list(range(n))
    t0 = time.monotonic()
    improved, peak = improve_order(graph, start, deadline=time.monotonic() + 3)
    assert time.monotonic() - t0 < 6
    assert graph.is_topological(improved) and peak == peak_of_order(graph, improved)
    assert peak < peak_of_order(graph, start)  # weight gradients move next to their inputs' frees
    t0 = time.monotonic()
    best = best_order(graph, time_limit=3)
    assert time.monotonic() - t0 < 8
    assert best.peak <= min(peak_of_order(graph, f(graph)) for f in (bfs_order, dfs_order, lpmf_order))


@settings(max_examples=120, deadline=None)
@given(graphs(max_nodes=6))
def test_forced_live_bytes_is_a_lower_bound_and_certifies_optima(graph: Graph) -> None:
    orders = all_orders(graph)
    for order in orders:
        steps = live_bytes_per_step(graph, order)
        for k, v in enumerate(order):
            assert forced_live_bytes(graph, v) <= steps[k]
    opt = min(naive_peak(graph, o) for o in orders)
    for order in orders:
        peak = naive_peak(graph, order)
        if certified_optimal(graph, order, peak):
            assert peak == opt


def test_best_order_stops_early_when_certified() -> None:
    # a chain: every order is the same, the bound is met at once
    buffers = [Buffer("x", 8, input=True)] + [Buffer(f"b{i}", 10 + i) for i in range(300)]
    nodes = [Node("n0", ("x",), ("b0",))]
    nodes += [Node(f"n{i}", (f"b{i - 1}",), (f"b{i}",)) for i in range(1, 300)]
    graph = Graph(tuple(buffers), tuple(nodes))
    t0 = time.monotonic()
    res = best_order(graph, time_limit=20)
    assert time.monotonic() - t0 < 5
    assert res.optimal and res.method == "baseline"
