"""How much of a training step's reserved memory is live, per memory pool, from the allocator's trace.

    python bench/graph_pool_probe.py CASE MODE   (CASE: a `coil bench` training case; MODE: coil,
                                                  inductor or eager; one process per call)

Runs the case's step as `coil bench` measures a mode's own-process warm peak (first call, then to
the replayed call, then one measured call after `empty_cache`), with the caching allocator
recording every allocation and free (`torch.cuda.memory._record_memory_history`, Python stacks).
From the trace it computes, per pool (CUDA-graph pool or the ordinary allocator), the peak of live
bytes (the sum of the sizes of blocks allocated and not yet freed, over the whole run) and compares
it with what the pool reserves: the gap is rounding and fragmentation, which a better packing could
take back; the live peak itself only a different order or fewer buffers can lower. For the measured
call it lists the ordinary pool's allocations by site (first frame in coil, else outside torch).

A segment's pool comes from the final snapshot (`segment_pool_id`; a piece mapped into an
expandable segment belongs to the snapshot entry whose range holds it); a segment freed before the
end (`empty_cache`) belonged to the ordinary pool (CUDA-graph pools keep theirs while their graphs
live).
"""

from __future__ import annotations

import bisect
import collections
import json
import sys
from typing import Any

MiB = 1 << 20


def _site(frames: list[dict[str, Any]]) -> str:
    for f in frames:
        if "/coil/" in str(f.get("filename", "")):
            return f"{'/'.join(str(f['filename']).split('/')[-2:])}:{f.get('line')}:{f.get('name')}"
    for f in frames:
        name = str(f.get("filename", ""))
        if "/torch/" not in name and "/triton/" not in name:
            return f"{'/'.join(name.split('/')[-2:])}:{f.get('line')}:{f.get('name')}"
    return "?"


def analyse(snap: dict[str, Any], step_from: int) -> dict[str, Any]:
    """Per pool: reserved at the end, live peak over the trace (and over the events from index
    `step_from` on: the measured call), block count; the measured call's ordinary-pool sites."""
    final = {s["address"]: str(tuple(s.get("segment_pool_id", (0, 0)))) for s in snap["segments"]}
    reserved: dict[str, int] = collections.Counter()
    for s in snap["segments"]:
        reserved[final[s["address"]]] += s["total_size"]
    trace = snap["device_traces"][0] if snap["device_traces"] else []
    # segment instances: (start, end, id); pool resolved at the end
    starts: list[int] = []
    segs: list[tuple[int, int, int]] = []
    seg_pool: dict[int, str] = {}
    alive: dict[int, tuple[int, int]] = {}  # start addr -> (end, id)
    block_seg: dict[int, tuple[int, int]] = {}  # block addr -> (size, seg id)
    events: list[tuple[int, int, int]] = []  # (index, +/-size, seg id)
    grew: list[tuple[int, int, int]] = []  # (index, address, bytes) of each segment alloc or map
    for i, e in enumerate(trace):
        a, n = e.get("action"), int(e.get("size", 0))
        addr = int(e.get("addr", 0))
        if a in ("segment_alloc", "segment_map"):
            grew.append((i, addr, n))
            sid = len(seg_pool)
            seg_pool[sid] = "(0, 0) freed"
            alive[addr] = (addr + n, sid)
            k = bisect.bisect_left(starts, addr)
            starts.insert(k, addr)
            segs.insert(k, (addr, addr + n, sid))
        elif a in ("segment_free", "segment_unmap"):
            if addr in alive:
                _, sid = alive.pop(addr)
                k = bisect.bisect_left(starts, addr)
                if k < len(starts) and starts[k] == addr:
                    starts.pop(k)
                    segs.pop(k)
        elif a == "alloc":
            k = bisect.bisect_right(starts, addr) - 1
            sid = segs[k][2] if k >= 0 and segs[k][0] <= addr < segs[k][1] else -1
            block_seg[addr] = (n, sid)
            events.append((i, n, sid))
        elif a == "free_completed" and addr in block_seg:
            n, sid = block_seg.pop(addr)
            events.append((i, -n, sid))
    # an expandable segment is one snapshot entry over many mapped pieces: find by containment
    ranges = sorted((sg["address"], sg["address"] + sg["total_size"], final[sg["address"]]) for sg in snap["segments"])
    range_starts = [r[0] for r in ranges]
    for start, (_, sid) in alive.items():
        k = bisect.bisect_right(range_starts, start) - 1
        seg_pool[sid] = ranges[k][2] if k >= 0 and start < ranges[k][1] else "(0, 0) freed"
    seg_pool[-1] = "unknown (allocated before recording)"
    live: dict[str, int] = collections.Counter()
    peak: dict[str, int] = collections.Counter()
    step_peak: dict[str, int] = collections.Counter()
    for i, d, sid in events:
        p = seg_pool[sid]
        live[p] += d
        peak[p] = max(peak[p], live[p])
        if i >= step_from:
            step_peak[p] = max(step_peak[p], live[p])
    # what is live at each pool's peak, by site (second pass up to the peak's event)
    at_peak: dict[str, list[tuple[str, float]]] = {}
    for pool in peak:
        idx = next((i for (i, _, _), lv in zip(events, _running(events, seg_pool, pool), strict=True) if lv == peak[pool]), -1)
        held: dict[int, tuple[int, str, str]] = {}
        for e in trace[: idx + 1]:
            if e.get("action") == "alloc":
                frames = e.get("frames", [])
                held[int(e["addr"])] = (int(e.get("size", 0)), _site(frames), _wrapper_line(frames))
            elif e.get("action") == "free_completed":
                held.pop(int(e.get("addr", 0)), None)
        ev_pool = {int(trace[i]["addr"]): seg_pool[sid] for i, d, sid in events if d > 0 and i <= idx}
        by: dict[str, int] = collections.Counter()
        for a, (n, s, _) in held.items():
            if ev_pool.get(a) == pool:
                by[s] += n
        at_peak[pool] = [(s, round(n / MiB, 1)) for s, n in by.most_common(12)]
        # the allocation that reached the peak, and the largest blocks live then, by wrapper line
        if idx >= 0:
            blocks = sorted(((n, w) for a, (n, _, w) in held.items() if ev_pool.get(a) == pool), reverse=True)
            at_peak[pool + " reached at"] = [(_wrapper_line(trace[idx].get("frames", [])), round(peak[pool] / MiB, 1))]
            at_peak[pool + " largest"] = [(w, round(n / MiB, 1)) for n, w in blocks[:25]]
    growth = _growth(trace, events, seg_pool, grew, ranges)
    sites: dict[str, int] = collections.Counter()
    for e in trace[step_from:]:
        if e.get("action") == "alloc":
            sites[_site(e.get("frames", []))] += int(e.get("size", 0))
    pools = sorted(set(reserved) | set(peak))
    return {"pools": {p: {"reserved_mib": round(reserved.get(p, 0) / MiB, 1),
                          "live_peak_mib": round(peak.get(p, 0) / MiB, 1),
                          "step_live_peak_mib": round(step_peak.get(p, 0) / MiB, 1),
                          "live_at_end_mib": round(live.get(p, 0) / MiB, 1)} for p in pools},
            "trace_events": len(trace), "at_peak": at_peak, "growth": growth,
            "live_at_end": [(round(b["size"] / MiB, 1), s.get("stream"), str(tuple(s.get("segment_pool_id", (0, 0)))),
                             _site(b.get("frames", [])))
                            for s in snap["segments"] for b in s.get("blocks", [])
                            if b["state"] == "active_allocated" and b["size"] >= MiB][:40],
            "step_alloc_sites_mib": [(s, round(n / MiB, 1)) for s, n in sites.most_common(15)]}


def _growth(trace: list[dict[str, Any]], events: list[tuple[int, int, int]], seg_pool: dict[int, str],
            grew: list[tuple[int, int, int]], ranges: list[tuple[int, int, str]]) -> dict[str, Any]:
    """Per pool, when its reserved memory grew: the last five segment allocations or maps (trace
    index, MiB, the pool's live MiB just before, the allocation that asked for it and the
    wrapper line it came from). The last one sets what the pool reserves at the end."""
    starts = [r[0] for r in ranges]

    def pool_of(addr: int) -> str:
        k = bisect.bisect_right(starts, addr) - 1
        return ranges[k][2] if k >= 0 and addr < ranges[k][1] else "(0, 0) freed"

    live: dict[str, int] = collections.Counter()
    out: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    g = 0
    for i, d, sid in [*events, (len(trace), 0, -1)]:
        while g < len(grew) and grew[g][0] < i:
            gi, addr, n = grew[g]
            pool = pool_of(addr)
            nxt = next((e for e in trace[gi + 1: gi + 4] if e.get("action") == "alloc"), {})
            out[pool].append({"index": gi, "mib": round(n / MiB, 1), "live_before_mib": round(live[pool] / MiB, 1),
                              "for_alloc_mib": round(int(nxt.get("size", 0)) / MiB, 1),
                              "wrapper_line": _wrapper_line(nxt.get("frames", []))})
            g += 1
        if sid >= 0:
            live[seg_pool[sid]] += d
    return {p: v[-5:] for p, v in out.items()}


def _wrapper_line(frames: list[dict[str, Any]]) -> str:
    """The generated wrapper's frame (`<coil wrapper NAME>:line`), else the first coil frame."""
    for f in frames:
        if str(f.get("filename", "")).startswith("<coil wrapper"):
            return f"{f['filename']}:{f.get('line')}"
    return _site(frames)


def _running(events: list[tuple[int, int, int]], seg_pool: dict[int, str], pool: str) -> list[int]:
    """The pool's live bytes after each event (other pools' events repeat the last value)."""
    out, live = [], 0
    for _, d, sid in events:
        if seg_pool[sid] == pool:
            live += d
        out.append(live)
    return out


def _runners() -> list[dict[str, Any]]:
    """Each live CUDA-graph runner's inputs: how many, which are static (used in place), borrowed
    (another runner's output, no copy) or copied into a buffer of the graph's, with those bytes,
    and which of the copied ones the graph copies late (at their first use)."""
    from coil.runtime import cudagraph

    out = []
    for refs in cudagraph._POOL_MEMBERS.values():
        for ref in refs:
            r = ref()
            if r is None:
                continue
            copied = [i for i in r._copy_idx if i not in r.borrowed]
            sizes = []
            for i in copied:
                if i in r._input_meta:
                    size, _, dtype = r._input_meta[i]
                    n = dtype.itemsize
                    for d in size:
                        n *= int(d)
                else:
                    t = r._static_inputs[i]
                    n = t.untyped_storage().nbytes() if t is not None else 0
                sizes.append(round(n / MiB, 2))
            out.append({"inputs": r._n, "static": len(r.static_indices), "borrowed": len(r.borrowed),
                        "copied": len(copied), "copied_mib": sorted(sizes, reverse=True)[:10],
                        "in_capture": sorted(r._in_slots), "late": sorted(getattr(r, "_late", {})),
                        "late_scratch_mib": round(r._copies.size / MiB, 2) if getattr(r, "_copies", None) else None,
                        "late_fallbacks": r._copies.fallbacks if getattr(r, "_copies", None) else None,
                        "captured": r.graph is not None,
                        "uncaptured_calls": r.uncaptured_calls})
    return out


def main(argv: list[str]) -> int:
    import coil.backend  # noqa: F401  (registers backend="coil")
    import torch
    from coil.backend import bench_models as bm
    from coil.backend.bench import _warm_peak

    case, mode = argv
    torch.cuda.memory._record_memory_history(enabled="all", context="alloc", stacks="python",
                                             max_entries=3_000_000)
    seconds, step = bm.first_call(case, mode)
    for _ in range(bm.ACCURACY_CALL - 1):
        step()
    torch.cuda.synchronize()
    n0 = len(torch.cuda.memory._snapshot()["device_traces"][0])
    peak = _warm_peak(step)
    snap = torch.cuda.memory._snapshot()
    out = analyse(snap, n0)
    trace = snap["device_traces"][0]
    out["step_unattributed_allocs_mib"] = sorted(
        (round(int(e.get("size", 0)) / MiB, 2) for e in trace[n0:]
         if e.get("action") == "alloc" and _site(e.get("frames", [])) == "?"), reverse=True)[:20]
    out["runners"] = _runners()
    print(json.dumps({"case": case, "mode": mode, "first_call_s": round(seconds, 1),
                      "peak_mib": round(peak["peak_mib"], 1),
                      "peak_allocated_mib": round(peak["peak_allocated_mib"], 1), **out}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
