"""The timeline plot (optional matplotlib) and the frozen public API."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import coil.memory_planner as mp
import pytest
from coil.memory_planner import Block, timeline_png, timeline_series

PUBLIC_API = [
    "Block",
    "Buffer",
    "BufferLifetime",
    "Graph",
    "GraphError",
    "InputError",
    "Node",
    "OrderResult",
    "Packing",
    "ReusePlan",
    "SearchResult",
    "beam_order",
    "best_order",
    "bfs_order",
    "blocks_from_order",
    "check_reuse_plan",
    "dfs_order",
    "exact_order",
    "greedy_by_size",
    "improve_order",
    "lifetimes_from_order",
    "live_bytes_per_step",
    "live_lower_bound",
    "lpmf_order",
    "pack",
    "peak_of_order",
    "plan_reuse",
    "read_blocks_csv",
    "read_graph_json",
    "search_packing",
    "timeline_png",
    "timeline_series",
    "validate_packing",
    "write_blocks_csv",
    "write_graph_json",
]


def test_public_api_snapshot() -> None:
    """Adding or removing a public name must be deliberate: update this list and the README."""
    assert sorted(mp.__all__) == PUBLIC_API
    for name in PUBLIC_API:
        assert getattr(mp, name) is not None


def test_contract_names() -> None:
    from coil.memory_planner import BufferLifetime, ReusePlan, plan_reuse  # noqa: F401

    assert [f for f in BufferLifetime.__dataclass_fields__] == [
        "name",
        "size",
        "start",
        "end",
        "pool",
    ]
    assert [f for f in ReusePlan.__dataclass_fields__] == [
        "storage",
        "peak_bytes",
        "unplanned_peak_bytes",
    ]


def test_import_needs_no_third_party() -> None:
    for mod in list(sys.modules):
        if mod.startswith("coil.memory_planner"):
            src = Path(sys.modules[mod].__file__ or "").read_text()
            assert "import torch" not in src and "import numpy" not in src


BLOCKS = [Block(f"b{i}", i, i + 3, 10 * (i + 1)) for i in range(12)]


def test_series_sum_to_live_bytes() -> None:
    steps, series = timeline_series(BLOCKS, bands=3)
    assert len(series) == 4  # 3 bands + other
    for k, t in enumerate(steps):
        live = sum(b.size for b in BLOCKS if b.lower <= t < b.upper)
        assert sum(row[k] for row in series.values()) == live


def test_missing_matplotlib_message(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ImportError, match=r"coil-memory-planner\[plot\]"):
        timeline_png(BLOCKS, tmp_path / "t.png")


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="needs [plot] extra")
def test_png_written(tmp_path: Path) -> None:
    out = tmp_path / "t.png"
    timeline_png(BLOCKS, out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
