"""The command line: file formats, exit codes and one-line errors (run in-process and as -m)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from coil.memory_planner import Block, read_blocks_csv, validate_packing
from coil.memory_planner.cli import main

CSV = "id,lower,upper,size\n0,0,2,4\n1,1,3,4\n2,2,4,2\n"


def test_pack_roundtrip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src, out = tmp_path / "in.csv", tmp_path / "out.csv"
    src.write_text(CSV)
    assert main(["pack", str(src), "--time-limit", "1", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "lower bound:     8" in text and "arena size:      8" in text
    lines = out.read_text().splitlines()
    assert lines[0] == "id,lower,upper,size,offset"
    blocks = read_blocks_csv(src)
    offsets = {row.split(",")[0]: int(row.split(",")[4]) for row in lines[1:]}
    validate_packing(blocks, offsets)


def test_pack_capacity_not_met_exits_1(tmp_path: Path) -> None:
    src = tmp_path / "in.csv"
    src.write_text(CSV)
    assert main(["pack", str(src), "--capacity", "7", "--time-limit", "0.5"]) == 1


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("id,lower,upper\n0,0,1\n", "in.csv:1: header lacks column"),
        ("id,lower,upper,size\n0,0,1,x\n", "in.csv:2: size 'x' is not an integer"),
        ("id,lower,upper,size\n0,0,1,4\n1,0,1,-3\n", "in.csv:3: .*negative size"),
        ("id,lower,upper,size\n0,0,1,4\n0,1,2,4\n", "in.csv:3: duplicate id"),
        ("id,lower,upper,size\n0,0,1\n", "in.csv:2: expected 4 fields"),
        ("id,lower,upper,size\n0,3,1,4\n", "in.csv:2: .*empty lifetime"),
    ],
)
def test_pack_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, match: str
) -> None:
    src = tmp_path / "in.csv"
    src.write_text(text)
    assert main(["pack", str(src)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert __import__("re").search(match, err)


GRAPH = {
    "buffers": [
        {"name": "x", "size": 1, "input": True},
        {"name": "a", "size": 100},
        {"name": "b", "size": 100},
        {"name": "ra", "size": 1},
        {"name": "rb", "size": 1},
        {"name": "y", "size": 1, "output": True},
    ],
    "nodes": [
        {"name": "ma", "reads": ["x"], "writes": ["a"]},
        {"name": "mb", "reads": ["x"], "writes": ["b"]},
        {"name": "sa", "reads": ["a"], "writes": ["ra"]},
        {"name": "sb", "reads": ["b"], "writes": ["rb"]},
        {"name": "join", "reads": ["ra", "rb"], "writes": ["y"]},
    ],
}


def test_order_roundtrip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src, out = tmp_path / "g.json", tmp_path / "o.json"
    src.write_text(json.dumps(GRAPH))
    assert main(["order", str(src), "--time-limit", "1", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    result = json.loads(out.read_text())
    assert result["baseline_peak"] == 202 and result["peak"] == 103
    assert "baseline peak:   202" in text and "chosen peak:     103" in text
    assert sorted(result["order"]) == sorted(n["name"] for n in GRAPH["nodes"])


def _with(**changes: object) -> dict[str, object]:
    g = json.loads(json.dumps(GRAPH))
    g.update(changes)
    return g


@pytest.mark.parametrize(
    ("graph", "match"),
    [
        (
            _with(nodes=[*GRAPH["nodes"], {"name": "loop", "reads": ["y"], "writes": ["x2"]}]),
            "node 'loop' uses unknown buffer 'x2'",
        ),
        (
            _with(
                nodes=[
                    {"name": "p", "reads": ["b"], "writes": ["a"]},
                    {"name": "q", "reads": ["a"], "writes": ["b"]},
                ]
            ),
            "cycle through node",
        ),
        (
            _with(nodes=[*GRAPH["nodes"], {"name": "again", "reads": [], "writes": ["a"]}]),
            "buffer 'a' has two writers: 'ma' and 'again'",
        ),
        (_with(buffers=[{"name": "x", "size": -1, "input": True}]), "buffer 'x' has negative size"),
        (_with(nodes=[{"name": "bad", "reads": "x"}]), "node 'bad': field 'reads' must be a list"),
        ("{not json", "g.json:1: invalid JSON"),
    ],
)
def test_order_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], graph: object, match: str
) -> None:
    src = tmp_path / "g.json"
    src.write_text(graph if isinstance(graph, str) else json.dumps(graph))
    assert main(["order", str(src)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert __import__("re").search(match, err), err


def test_python_dash_m(tmp_path: Path) -> None:
    src = tmp_path / "in.csv"
    src.write_text("id,lower,upper,size\n0,0,1,-5\n")
    proc = subprocess.run(
        [sys.executable, "-m", "coil.memory_planner", "pack", str(src)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith("coil-memory-planner: error:") and "Traceback" not in proc.stderr


def test_alignment_column(tmp_path: Path) -> None:
    src = tmp_path / "in.csv"
    src.write_text("id,lower,upper,size,alignment\na,0,2,3,4\nb,0,2,3,4\n")
    blocks = read_blocks_csv(src)
    assert blocks == [Block("a", 0, 2, 3, 4), Block("b", 0, 2, 3, 4)]
