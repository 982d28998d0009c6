"""The ordinary pool's segments at a training step's warm peak: what keeps each one reserved.

    python bench/ordinary_segments.py CASE MODE   (a `coil bench` training case; coil or inductor)

Runs the case's step as `coil bench` measures its own-process warm peak (to the replayed call,
then `empty_cache`), then prints per ordinary-pool segment (CUDA-graph pools left out) its size,
the bytes allocated in it and the Python site of its largest live blocks, largest segments first,
and the totals. Used in session 16 to find why GPT-2's ordinary pool grew when parameters'
casts were recomputed in the backward (that run printed "??:0" for every site: C++ frames were
taken for Python ones; fixed after, not rerun).
"""

from __future__ import annotations

import collections
import sys

MiB = 1 << 20


def _site(frames: list[dict[str, object]]) -> str:
    """The first Python frame in coil, else outside torch and Triton ("?" when there is none:
    C++ frames have no file, "??")."""
    py = [f for f in frames if str(f.get("filename", "")).endswith(".py") or "<coil wrapper" in str(f.get("filename", ""))]
    for f in py:
        name = str(f.get("filename", ""))
        if "/coil/" in name or "<coil wrapper" in name or ("/torch/" not in name and "/triton/" not in name):
            return f"{'/'.join(name.split('/')[-2:])}:{f.get('line')}"
    return "?"


def main(argv: list[str]) -> int:
    import torch
    from coil.backend import bench_models as bm

    case, mode = argv[1], argv[2]
    torch.cuda.memory._record_memory_history(max_entries=400000)
    _, step = bm.first_call(case, mode)
    for _ in range(bm.ACCURACY_CALL - 1):
        step()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    step()
    torch.cuda.synchronize()
    print(f"peak reserved {torch.cuda.max_memory_reserved() / MiB:.0f} MiB")
    snap = torch.cuda.memory._snapshot()
    rows = []
    for seg in snap["segments"]:
        if tuple(seg.get("segment_pool_id", (0, 0))) != (0, 0):
            continue
        live = [b for b in seg["blocks"] if b["state"] == "active_allocated"]
        sites: collections.Counter[str] = collections.Counter()
        for b in live:
            sites[_site(b.get("frames", []))] += b["size"]
        rows.append((seg["total_size"], sum(b["size"] for b in live), seg.get("stream"),
                     [(s, round(n / MiB, 1)) for s, n in sites.most_common(3)]))
    rows.sort(key=lambda r: -r[0])
    for total, used, stream, sites in rows:
        print(f"segment {total / MiB:7.1f} MiB, live {used / MiB:7.1f}, stream {stream}: {sites}")
    print(f"ordinary pool: {len(rows)} segments, {sum(r[0] for r in rows) / MiB:.0f} MiB reserved, "
          f"{sum(r[1] for r in rows) / MiB:.0f} MiB live")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
