"""Command line: ``python -m coil.memory_planner pack|order ...`` (also ``coil-memory-planner``).

Exit codes: 0 success; 1 ``pack --capacity`` not met within the time limit; 2 bad input or
usage (one line on stderr, never a traceback).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from coil.memory_planner.arena import validate_packing
from coil.memory_planner.formats import (
    InputError,
    read_blocks_csv,
    read_graph_json,
    write_blocks_csv,
)
from coil.memory_planner.greedy import greedy_by_size
from coil.memory_planner.order_search import best_order
from coil.memory_planner.pack import pack

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="coil-memory-planner",
        description="Order ops for low peak memory and pack buffers into one arena.",
    )
    sub = p.add_subparsers(dest="command", required=True)
    pk = sub.add_parser("pack", help="pack a MiniMalloc CSV (id,lower,upper,size) into an arena")
    pk.add_argument("input", type=Path)
    pk.add_argument("--capacity", type=int, default=None, help="arena size to meet (bytes)")
    pk.add_argument("--time-limit", type=float, default=10.0, help="seconds (default 10)")
    pk.add_argument("-o", "--output", type=Path, default=None, help="CSV with an offset column")
    od = sub.add_parser("order", help="find a low-peak order for a graph JSON file")
    od.add_argument("input", type=Path)
    od.add_argument("--time-limit", type=float, default=5.0, help="seconds (default 5)")
    od.add_argument("-o", "--output", type=Path, default=None, help="JSON with the order")
    od.add_argument("--timeline", type=Path, default=None, help="PNG plot (needs [plot] extra)")
    return p


def _pack(args: argparse.Namespace) -> int:
    blocks = read_blocks_csv(args.input)
    if args.capacity is not None and args.capacity < 0:
        raise InputError(f"--capacity must be >= 0, got {args.capacity}")
    if args.time_limit < 0:
        raise InputError(f"--time-limit must be >= 0, got {args.time_limit}")
    t0 = time.monotonic()
    result = pack(blocks, capacity=args.capacity, time_limit=args.time_limit)
    elapsed = time.monotonic() - t0
    validate_packing(blocks, result.offsets)
    greedy = greedy_by_size(blocks).arena_size
    print(f"blocks:          {len(blocks)}")
    print(f"lower bound:     {result.lower_bound}")
    print(f"greedy-by-size:  {greedy}")
    print(f"arena size:      {result.arena_size} ({result.method}, {elapsed:.1f} s)")
    if args.output is not None:
        write_blocks_csv(args.output, blocks, result.offsets)
    if args.capacity is not None and result.arena_size > args.capacity:
        print(
            f"coil-memory-planner: capacity {args.capacity} not met within "
            f"{args.time_limit:g} s (best {result.arena_size})",
            file=sys.stderr,
        )
        return 1
    return 0


def _order(args: argparse.Namespace) -> int:
    graph = read_graph_json(args.input)
    if args.time_limit < 0:
        raise InputError(f"--time-limit must be >= 0, got {args.time_limit}")
    result = best_order(graph, time_limit=args.time_limit)
    print(f"baseline peak:   {result.baseline_peak}")
    print(
        f"chosen peak:     {result.peak} ({result.method}{', optimal' if result.optimal else ''})"
    )
    if args.output is not None:
        args.output.write_text(
            json.dumps(
                {
                    "order": list(result.order),
                    "peak": result.peak,
                    "baseline_peak": result.baseline_peak,
                },
                indent=2,
            )
            + "\n"
        )
    if args.timeline is not None:
        from coil.memory_planner.lifetimes import blocks_from_order
        from coil.memory_planner.plot import timeline_png

        timeline_png(blocks_from_order(graph, graph.node_index(result.order)), args.timeline)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (see the module docstring)."""
    args = _parser().parse_args(argv)
    try:
        if args.command == "pack":
            return _pack(args)
        return _order(args)
    except (InputError, OSError, ImportError) as e:
        msg = str(e).replace("\n", " ")
        print(f"coil-memory-planner: error: {msg}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
