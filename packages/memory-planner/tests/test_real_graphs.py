"""Acceptance on planner graphs exported from real training steps (benchmarks/graphs/), and the
graph JSON writer they are stored with. No torch needed: the graphs are plain (gzipped) JSON."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from coil.memory_planner import (
    Buffer,
    Graph,
    InputError,
    Node,
    best_order,
    bfs_order,
    blocks_from_order,
    dfs_order,
    lpmf_order,
    pack,
    peak_of_order,
    read_graph_json,
    validate_packing,
    write_graph_json,
)

GRAPHS = Path(__file__).resolve().parents[1] / "benchmarks" / "graphs"
STORED = sorted(GRAPHS.glob("*.json.gz"))


def test_graphs_are_stored() -> None:
    names = {p.name for p in STORED}
    for model in ("gpt2", "bert", "resnet50"):
        for part in ("fw", "bw", "train"):
            assert f"{model}_{part}.json.gz" in names


@pytest.mark.parametrize("path", STORED, ids=[p.name for p in STORED])
def test_stored_graph_loads_and_its_node_order_is_topological(path: Path) -> None:
    g = read_graph_json(path)
    assert g.nodes and g.is_topological(range(len(g.nodes)))
    assert any(b.input for b in g.buffers) and any(b.output for b in g.buffers)


def test_smallest_graph_meets_the_acceptance_rules() -> None:
    """The planner's acceptance rules: the chosen order's peak <= the best of LPMF, BFS and DFS; the arena of the
    chosen order <= 1.02 x its live-set lower bound."""
    path = min(STORED, key=lambda p: p.stat().st_size)
    g = read_graph_json(path)
    res = best_order(g, time_limit=3)
    order = g.node_index(res.order)
    assert res.peak == peak_of_order(g, order)
    assert res.peak <= min(peak_of_order(g, f(g)) for f in (lpmf_order, bfs_order, dfs_order))
    blocks = blocks_from_order(g, order)
    packing = pack(blocks, time_limit=3)
    validate_packing(blocks, packing.offsets)
    assert packing.arena_size <= 1.02 * packing.lower_bound


def _graph() -> Graph:
    return Graph(
        (
            Buffer("x", 4, input=True),
            Buffer("t", 10, size_known_at="a"),
            Buffer("y", 2, output=True),
            Buffer("u", 0),
        ),
        (Node("a", ("x",), ("u",)), Node("b", ("x", "u"), ("t",)), Node("c", ("t",), ("y",))),
    )


@pytest.mark.parametrize("name", ["g.json", "g.json.gz"])
def test_write_graph_json_round_trips(tmp_path: Path, name: str) -> None:
    g = _graph()
    write_graph_json(tmp_path / name, g)
    assert read_graph_json(tmp_path / name) == g
    if name.endswith(".gz"):
        first = (tmp_path / name).read_bytes()
        write_graph_json(tmp_path / name, g)
        assert (tmp_path / name).read_bytes() == first  # deterministic (no gzip timestamp)
        assert gzip.decompress(first).startswith(b'{"buffers": [')


def test_bad_gzip_is_an_input_error(tmp_path: Path) -> None:
    (tmp_path / "g.json.gz").write_bytes(b"not gzip")
    with pytest.raises(InputError, match="not a valid gzip file"):
        read_graph_json(tmp_path / "g.json.gz")
