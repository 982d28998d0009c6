"""Benchmark: pack the MiniMalloc "challenging" instances, greedy-by-size beside coil.

Usage: python packages/memory-planner/benchmarks/minimalloc_bench.py [DIR] [--time-limit S]
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
    args = p.parse_args()
    print("| instance | blocks | lower bound / cap | greedy-by-size / cap | coil / cap | seconds |")
    print("|---|---|---|---|---|---|")
    met = 0
    files = sorted(args.dir.glob("*.csv"))
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
