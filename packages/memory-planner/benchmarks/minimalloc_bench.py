"""Benchmark: pack the MiniMalloc "challenging" instances, greedy-by-size beside coil.

Usage: python packages/memory-planner/benchmarks/minimalloc_bench.py [DIR] [--time-limit S]
       [--only A,E,...]
Prints a Markdown table: instance, blocks, live-set lower bound, greedy-by-size arena/capacity,
coil arena/capacity, seconds. Every packing is validated.
"""

from __future__ import annotations

import argparse
import re
import time
from pathlib import Path

from coil.memory_planner import greedy_by_size, pack, read_blocks_csv, validate_packing


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("dir", nargs="?", default="/work/shared/benchmarks/minimalloc", type=Path)
    p.add_argument("--time-limit", type=float, default=60.0)
    p.add_argument("--only", default="", help="comma-separated instance names (default: all)")
    args = p.parse_args()
    only = {x for x in args.only.split(",") if x}
    print("| instance | blocks | lower bound / cap | greedy-by-size / cap | coil / cap | seconds |")
    print("|---|---|---|---|---|---|")
    met = 0
    files = sorted(f for f in args.dir.glob("*.csv") if not only or f.name.split(".")[0] in only)
    for f in files:
        m = re.search(r"\.(\d+)\.csv$", f.name)
        assert m, f.name
        cap = int(m.group(1))
        blocks = read_blocks_csv(f)
        greedy = greedy_by_size(blocks)
        t0 = time.monotonic()
        res = pack(blocks, capacity=cap, time_limit=args.time_limit)
        secs = time.monotonic() - t0
        validate_packing(blocks, res.offsets)
        met += res.arena_size <= cap
        print(
            f"| {f.name.split('.')[0]} | {len(blocks)} | {res.lower_bound / cap:.3f} "
            f"| {greedy.arena_size / cap:.3f} | {res.arena_size / cap:.3f} | {secs:.1f} |",
            flush=True,
        )
    print(f"\n{met} of {len(files)} packed within capacity (time limit {args.time_limit:g} s each)")


if __name__ == "__main__":
    main()
