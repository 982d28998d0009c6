"""Sizes known only at run time: planned with hints, never allocated before they are known."""

from __future__ import annotations

import time

import pytest
from coil.memory_planner import (
    Block,
    Buffer,
    Graph,
    GraphError,
    Node,
    best_order,
    blocks_from_order,
    exact_order,
    pack,
    validate_packing,
)
from hypothesis import given, settings
from hypothesis import strategies as st


def test_block_may_not_start_before_its_size_is_known() -> None:
    Block("d", 3, 5, 64, size_known_at=3)
    with pytest.raises(ValueError, match="known only at step 4"):
        Block("d", 3, 5, 64, size_known_at=4)


def _graph(known_after: str | None) -> Graph:
    # "nz" computes how many elements "dyn" gets; a greedy order would allocate dyn first.
    return Graph(
        (
            Buffer("x", 8, input=True),
            Buffer("count", 1),
            Buffer("dyn", 4, size_known_at=known_after),
            Buffer("big", 100),
            Buffer("y", 1, output=True),
        ),
        (
            Node("alloc_dyn", ("x",), ("dyn",)),
            Node("big_op", ("x",), ("big",)),
            Node("nz", ("big",), ("count",)),
            Node("use", ("dyn", "count"), ("y",)),
        ),
    )


def test_writer_never_runs_before_size_is_known() -> None:
    g = _graph("nz")
    res = best_order(g, time_limit=1)
    assert res.order.index("alloc_dyn") > res.order.index("nz")
    blocks = blocks_from_order(g, g.node_index(res.order))
    dyn = next(b for b in blocks if b.id == "dyn")
    assert dyn.size_known_at is not None and dyn.size_known_at <= dyn.lower
    packing = pack(blocks, time_limit=0.5)
    validate_packing(blocks, packing.offsets)


def test_unknown_size_node_is_an_error() -> None:
    with pytest.raises(GraphError, match="unknown node 'nope'"):
        _graph("nope")


@settings(max_examples=40, deadline=None)
@given(st.permutations(["alloc_dyn", "big_op", "nz", "use"]))
def test_every_optimal_order_respects_known_step(_perm: list[str]) -> None:
    g = _graph("nz")
    res = exact_order(g, deadline=time.monotonic() + 5)
    assert res is not None
    order = [g.nodes[v].name for v in res[0]]
    assert order.index("alloc_dyn") > order.index("nz")
