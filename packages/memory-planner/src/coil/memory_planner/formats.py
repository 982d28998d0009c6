"""Public file formats: MiniMalloc CSV for packing, graph JSON for ordering.

* CSV: header ``id,lower,upper,size`` (optional ``alignment`` column; other columns such as a
  previous ``offset`` are ignored). One block per row, integers, ``lower < upper``, ``size >= 0``.
  Output: the same columns plus ``offset``.
* Graph JSON: ``{"buffers": [{"name", "size", "input": bool, "output": bool,
  "size_known_at": node name (optional)}], "nodes": [{"name", "reads": [...], "writes": [...]}]}``.
  Output of ``order``: ``{"order": [node names], "peak": bytes, "baseline_peak": bytes}``.
  A graph file whose name ends in ``.gz`` is gzip-compressed (read and written transparently).

Every reader raises :class:`InputError` with a one-line message naming the file and line (CSV)
or the node/buffer (JSON) at fault.
"""

from __future__ import annotations

import csv
import gzip
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from coil.memory_planner.arena import Block
from coil.memory_planner.graph import Buffer, Graph, GraphError, Node

__all__ = [
    "InputError",
    "read_blocks_csv",
    "read_graph_json",
    "write_blocks_csv",
    "write_graph_json",
]

_REQUIRED = ("id", "lower", "upper", "size")


class InputError(ValueError):
    """A malformed input file; the message is one line and names where the fault is."""


def read_blocks_csv(path: str | Path) -> list[Block]:
    """Read a MiniMalloc CSV file into blocks (see the module docstring for the format)."""
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror}") from None
    rows = csv.reader(text.splitlines())
    header = next(rows, None)
    if header is None:
        raise InputError(f"{path}: empty file (expected header {','.join(_REQUIRED)})")
    header = [h.strip() for h in header]
    missing = [c for c in _REQUIRED if c not in header]
    if missing:
        raise InputError(f"{path}:1: header lacks column(s) {', '.join(missing)}")
    col = {name: header.index(name) for name in header}
    blocks: list[Block] = []
    seen: set[str] = set()
    for lineno, row in enumerate(rows, start=2):
        if not row or all(not c.strip() for c in row):
            continue
        if len(row) != len(header):
            raise InputError(f"{path}:{lineno}: expected {len(header)} fields, got {len(row)}")
        bid = row[col["id"]].strip()
        if not bid:
            raise InputError(f"{path}:{lineno}: empty id")
        if bid in seen:
            raise InputError(f"{path}:{lineno}: duplicate id {bid!r}")
        seen.add(bid)
        values: dict[str, int] = {}
        for name in (*_REQUIRED[1:], "alignment"):
            if name not in col:
                continue
            raw = row[col[name]].strip()
            try:
                values[name] = int(raw)
            except ValueError:
                raise InputError(f"{path}:{lineno}: {name} {raw!r} is not an integer") from None
        try:
            blocks.append(
                Block(
                    bid,
                    values["lower"],
                    values["upper"],
                    values["size"],
                    values.get("alignment", 1),
                )
            )
        except ValueError as e:
            raise InputError(f"{path}:{lineno}: {e}") from None
    return blocks


def write_blocks_csv(path: str | Path, blocks: Sequence[Block], offsets: Mapping[str, int]) -> None:
    """Write ``id,lower,upper,size,offset`` rows (plus ``alignment`` when any block has one)."""
    aligned = any(b.alignment != 1 for b in blocks)
    with Path(path).open("w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["id", "lower", "upper", "size", *(["alignment"] if aligned else []), "offset"])
        for b in blocks:
            extra = [b.alignment] if aligned else []
            w.writerow([b.id, b.lower, b.upper, b.size, *extra, offsets[b.id]])


def _field(obj: Mapping[str, Any], key: str, kind: type, where: str, default: Any = None) -> Any:
    if key not in obj:
        if default is not None:
            return default
        raise InputError(f"{where}: missing field {key!r}")
    value = obj[key]
    if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise InputError(f"{where}: field {key!r} must be an integer, got {value!r}")
    if kind is not int and not isinstance(value, kind):
        raise InputError(f"{where}: field {key!r} must be {kind.__name__}, got {value!r}")
    return value


def _names(obj: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = obj.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InputError(f"{where}: field {key!r} must be a list of buffer names")
    return tuple(value)


def _graph_text(path: str | Path) -> str:
    """The text of a graph file, gunzipped when its name ends in ``.gz``."""
    try:
        raw = Path(path).read_bytes()
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror}") from None
    if str(path).endswith(".gz"):
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as e:
            raise InputError(f"{path}: not a valid gzip file: {e}") from None
    try:
        return raw.decode()
    except UnicodeDecodeError:
        raise InputError(f"{path}: not UTF-8 text") from None


def read_graph_json(path: str | Path) -> Graph:
    """Read a graph JSON file (see the module docstring) into a validated :class:`Graph`."""
    try:
        data = json.loads(_graph_text(path))
    except json.JSONDecodeError as e:
        raise InputError(f"{path}:{e.lineno}: invalid JSON: {e.msg}") from None
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("buffers"), list)
        or not isinstance(data.get("nodes"), list)
    ):
        raise InputError(f"{path}: expected an object with lists 'buffers' and 'nodes'")
    buffers = []
    for k, raw in enumerate(data["buffers"]):
        where = f"{path}: buffer #{k}"
        if not isinstance(raw, dict):
            raise InputError(f"{where}: expected an object")
        name = _field(raw, "name", str, where)
        where = f"{path}: buffer {name!r}"
        known = raw.get("size_known_at")
        if known is not None and not isinstance(known, str):
            raise InputError(f"{where}: field 'size_known_at' must be a node name")
        buffers.append(
            Buffer(
                name,
                _field(raw, "size", int, where),
                _field(raw, "input", bool, where, False),
                _field(raw, "output", bool, where, False),
                known,
            )
        )
    nodes = []
    for k, raw in enumerate(data["nodes"]):
        where = f"{path}: node #{k}"
        if not isinstance(raw, dict):
            raise InputError(f"{where}: expected an object")
        name = _field(raw, "name", str, where)
        where = f"{path}: node {name!r}"
        nodes.append(Node(name, _names(raw, "reads", where), _names(raw, "writes", where)))
    try:
        return Graph(tuple(buffers), tuple(nodes))
    except GraphError as e:
        raise InputError(f"{path}: {e}") from None


def _graph_object(graph: Graph) -> dict[str, Any]:
    """The JSON object of ``graph`` (the format of :func:`read_graph_json`).

    Buffer flags and ``size_known_at`` are written only when set; buffers and nodes keep their
    order, so the node list's order (the baseline) survives a round trip.
    """
    buffers: list[dict[str, Any]] = []
    for b in graph.buffers:
        row: dict[str, Any] = {"name": b.name, "size": b.size}
        if b.input:
            row["input"] = True
        if b.output:
            row["output"] = True
        if b.size_known_at is not None:
            row["size_known_at"] = b.size_known_at
        buffers.append(row)
    nodes = [{"name": n.name, "reads": list(n.reads), "writes": list(n.writes)} for n in graph.nodes]
    return {"buffers": buffers, "nodes": nodes}


def write_graph_json(path: str | Path, graph: Graph) -> None:
    """Write ``graph`` as graph JSON (gzip-compressed when ``path`` ends in ``.gz``).

    ``read_graph_json(path)`` gives back an equal graph. The output is compact (one buffer or
    node per line) and deterministic: gzip output carries no timestamp.
    """
    data = _graph_object(graph)
    lines = ['{"buffers": [']
    lines += [",\n".join(json.dumps(b) for b in data["buffers"])]
    lines += ['], "nodes": [']
    lines += [",\n".join(json.dumps(n) for n in data["nodes"])]
    lines += ["]}"]
    text = "\n".join(lines) + "\n"
    if str(path).endswith(".gz"):
        Path(path).write_bytes(gzip.compress(text.encode(), mtime=0))
    else:
        Path(path).write_text(text)
