"""What is live at a training step's peak: the CUDA allocator's trace of one warm step, replayed.

    python bench/peak_live_set.py CASE MODE [MODE ...]   (CASE: a `coil bench` training case,
                                                          MODE: eager, inductor, coil)

One process; per mode the model is compiled and warmed up two steps, then one step runs under
`torch.cuda.memory._record_memory_history` (Python stacks). The allocator's events of that step
are replayed in order (alloc +size; free of a block allocated in the step -size; free of a block
that existed before the step -size, counted apart), which gives the step's peak above its start
and the blocks live at that moment. Printed per mode: the peak, and the live blocks grouped by
the innermost frame in generated code (coil's wrapper `<coil wrapper NAME>` with its source
line, Inductor's output code file and line) or else the innermost frame, largest first. Two
modes' lists side by side show which buffers make one peak higher than the other.
"""

from __future__ import annotations

import collections
import linecache
import sys
from typing import Any

import torch

MiB = 1 << 20


def _where(frames: list[dict[str, Any]], wrappers: dict[str, list[str]]) -> str:
    """The innermost frame in generated code (or the innermost frame), with its source line."""
    pick = None
    for f in frames:
        name = str(f.get("filename", ""))
        if name.startswith("<coil wrapper") or "torchinductor" in name or "/tmp/" in name:
            pick = f
            break
    if pick is None:
        pick = next((f for f in frames if "torch/" not in str(f.get("filename", ""))), frames[0] if frames else None)
    if pick is None:
        return "?"
    name, line = str(pick["filename"]), int(pick["line"])
    text = ""
    if name.startswith("<coil wrapper"):
        src = wrappers.get(name[len("<coil wrapper "):-1])
        if src is not None and 0 < line <= len(src):
            text = src[line - 1].strip()
    else:
        text = linecache.getline(name, line).strip()
    return f"{name.rsplit('/', 1)[-1]}:{line} {text[:110]}"


def live_at_peak(case: str, mode: str) -> None:
    from coil.backend import bench_models as bm

    spec, kind = bm._split(case)
    assert kind == "train_amp", "training cases only"
    model = bm._model(spec)
    inputs = spec.inputs(model)
    f = bm.compile_mode(model, mode)

    def step() -> None:
        model.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = spec.loss(f, bm._as_model_dtype(model, inputs))
        loss.backward()

    for _ in range(2):
        step()
    model.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    start = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.memory._record_memory_history(max_entries=2_000_000, stacks="python")
    step()
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    peak_alloc = torch.cuda.max_memory_allocated()

    wrappers: dict[str, list[str]] = {}
    if mode == "coil":
        from coil.backend.stats import COMPILED

        for s in COMPILED:
            wrappers[s.name] = s.wrapper_source.splitlines()

    live: dict[int, tuple[int, str]] = {}
    total = freed_old = best = 0
    best_live: dict[int, tuple[int, str]] = {}
    best_old = 0
    for e in snap["device_traces"][0]:
        action, addr, size = e["action"], e["addr"], e["size"]
        if action == "alloc":
            live[addr] = (size, _where(e.get("frames", []), wrappers))
            total += size
        elif action == "free_requested":
            if addr in live:
                total -= live.pop(addr)[0]
            else:
                freed_old += size
                total -= size
        else:
            continue
        if total > best:
            best, best_live, best_old = total, dict(live), freed_old
    print(f"\n== {case} {mode}: allocated at start {start / MiB:.1f} MiB, max_memory_allocated "
          f"{peak_alloc / MiB:.1f} MiB; replayed step peak +{best / MiB:.1f} MiB above start "
          f"({len(best_live)} blocks allocated in the step live, {best_old / MiB:.1f} MiB of older blocks "
          f"freed by then)")
    groups: dict[str, list[int]] = collections.defaultdict(list)
    for size, where in best_live.values():
        groups[where].append(size)
    for where, sizes in sorted(groups.items(), key=lambda kv: -sum(kv[1]))[:40]:
        print(f"  {sum(sizes) / MiB:8.1f} MiB {len(sizes):3d} x  {where}")


def main(argv: list[str]) -> int:
    case = argv[1]
    for mode in argv[2:] or ["inductor", "coil"]:
        torch._dynamo.reset()
        live_at_peak(case, mode)
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
