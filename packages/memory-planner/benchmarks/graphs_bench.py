"""Benchmark and acceptance check: order and pack the planner graphs of real training steps.

Usage: python packages/memory-planner/benchmarks/graphs_bench.py [FILES or DIR]
       [--order-time S] [--pack-time S]

For each graph (``*.json`` / ``*.json.gz``, default: every graph in ``benchmarks/graphs/``)
prints one Markdown row: nodes, buffers, the peaks (MiB) of the baseline order (the file's node
order), LPMF, BFS and DFS, the order chosen by ``best_order`` (``*``: proven optimal; its method
and seconds), then the arena of the chosen order's blocks packed by ``pack``
(``blocks_from_order``; graph inputs are not in the arena), the live-set lower bound of those
blocks, their ratio and the packing seconds. The chosen peak is checked against the oracle and
every packing is validated.

Acceptance (exit status 1 when a rule fails on any graph):

* the chosen order's peak is <= the lowest of the LPMF, BFS and DFS peaks;
* the arena is <= 1.02 x the live-set lower bound of the chosen order's blocks.

Standard library only (plus coil-memory-planner).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from coil.memory_planner import (
    best_order,
    bfs_order,
    blocks_from_order,
    dfs_order,
    lpmf_order,
    pack,
    peak_of_order,
    read_graph_json,
    validate_packing,
)

ARENA_SLACK = 1.02
MIB = 2**20


def _files(paths: list[Path]) -> list[Path]:
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            out += sorted([*p.glob("*.json"), *p.glob("*.json.gz")])
        else:
            out.append(p)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("paths", nargs="*", type=Path, default=[Path(__file__).parent / "graphs"])
    p.add_argument("--order-time", type=float, default=30.0, help="best_order budget per graph (s)")
    p.add_argument("--pack-time", type=float, default=30.0, help="pack budget per graph (s)")
    args = p.parse_args(argv)
    print(
        "| graph | nodes | buffers | baseline | LPMF | BFS | DFS | chosen (method, s) "
        "| arena | bound | arena / bound | pack s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    failures: list[str] = []
    files = _files(args.paths)
    for f in files:
        g = read_graph_json(f)
        name = f.name.removesuffix(".gz").removesuffix(".json")
        peaks = {}
        for label, fn in (("lpmf", lpmf_order), ("bfs", bfs_order), ("dfs", dfs_order)):
            peaks[label] = peak_of_order(g, fn(g))
        baseline = peak_of_order(g, range(len(g.nodes))) if g.is_topological(range(len(g.nodes))) else -1
        t0 = time.monotonic()
        res = best_order(g, time_limit=args.order_time)
        order_s = time.monotonic() - t0
        order = g.node_index(res.order)
        chosen = peak_of_order(g, order)
        assert chosen == res.peak, (name, chosen, res.peak)
        blocks = blocks_from_order(g, order)
        t0 = time.monotonic()
        packing = pack(blocks, time_limit=args.pack_time)
        pack_s = time.monotonic() - t0
        validate_packing(blocks, packing.offsets)
        bound = packing.lower_bound
        ratio = packing.arena_size / bound if bound else 1.0
        print(
            f"| {name} | {len(g.nodes)} | {len(g.buffers)} | {baseline / MIB:.1f} "
            f"| {peaks['lpmf'] / MIB:.1f} | {peaks['bfs'] / MIB:.1f} | {peaks['dfs'] / MIB:.1f} "
            f"| {chosen / MIB:.1f}{'*' if res.optimal else ''} ({res.method}, {order_s:.1f}) "
            f"| {packing.arena_size / MIB:.1f} "
            f"| {bound / MIB:.1f} | {ratio:.4f} | {pack_s:.1f} |",
            flush=True,
        )
        if chosen > min(peaks.values()):
            failures.append(f"{name}: chosen peak {chosen} > best baseline {min(peaks.values())}")
        if packing.arena_size > ARENA_SLACK * bound:
            failures.append(f"{name}: arena {packing.arena_size} > {ARENA_SLACK} x bound {bound}")
    print()
    for msg in failures:
        print(f"FAIL {msg}")
    print(f"{len(files) - len({m.split(':')[0] for m in failures})} of {len(files)} graphs pass")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
