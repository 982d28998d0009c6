"""Where a training step's peak memory goes: eager, Inductor and coil on one model case.

    python bench/memory_breakdown.py CASE [MODE ...]   (CASE: a `coil bench` training case, e.g.
                                                        gpt2_train_amp; MODE: eager, inductor, coil)

One process per call; each mode compiles, warms up two steps, then measures one step in phases
(CUDA caching allocator counters, bytes): `base` allocated before the step (parameters, inputs),
`fw peak` the forward's peak, `saved` allocated after the forward minus `base` (what the backward
keeps: activations, the loss), `bw peak` the backward's peak, `step peak` the whole step's peak
(the number `coil bench` reports). The tensors the autograd graph saves are listed through
`torch.autograd.graph.saved_tensors_hooks` (unique storages, by bytes), so two modes' saved sets
can be diffed. For coil, every compiled graph's planned peak (the wrapper's own) is printed too.
"""

from __future__ import annotations

import collections
import sys
from typing import Any

import torch

MiB = 1 << 20


def _saved(step: Any) -> list[tuple[int, str]]:
    """(bytes, description) of each distinct storage the autograd graph saves during `step`."""
    seen: dict[int, tuple[int, str]] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        if t.device.type == "cuda":
            st = t.untyped_storage()
            seen.setdefault(st.data_ptr(), (st.nbytes(), f"{str(t.dtype).removeprefix('torch.')}{list(t.shape)}"))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        step()
    return sorted(seen.values(), reverse=True)


def measure(case: str, mode: str) -> dict[str, Any]:
    from coil.backend import bench_models as bm

    spec, kind = bm._split(case)
    assert kind == "train_amp", "training cases only"
    model = bm._model(spec)
    inputs = spec.inputs(model)
    f = bm.compile_mode(model, mode)

    def fw() -> Any:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return spec.loss(f, bm._as_model_dtype(model, inputs))

    for _ in range(2):
        model.zero_grad(set_to_none=True)
        fw().backward()
    model.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    loss = fw()
    torch.cuda.synchronize()
    fw_peak = torch.cuda.max_memory_allocated()
    after_fw = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    loss.backward()
    torch.cuda.synchronize()
    bw_peak = torch.cuda.max_memory_allocated()
    end = torch.cuda.memory_allocated()
    del loss
    model.zero_grad(set_to_none=True)

    def step() -> None:
        fw().backward()

    saved = _saved(step)
    return {"mode": mode, "base": base, "fw_peak": fw_peak, "saved": after_fw - base, "bw_peak": bw_peak,
            "end": end, "step_peak": max(fw_peak, bw_peak), "saved_list": saved}


def main(argv: list[str]) -> int:
    case = argv[1]
    modes = argv[2:] or ["eager", "inductor", "coil"]
    rows = []
    for mode in modes:
        torch._dynamo.reset()
        r = measure(case, mode)
        rows.append(r)
        if mode == "coil":
            from coil.backend.stats import COMPILED

            for s in COMPILED:
                print(f"  coil graph {s.name}: planned peak {s.planned_peak}, kernels {s.kernels}, externs "
                      f"{s.externs}, fallbacks {s.fallbacks}")
        torch.cuda.empty_cache()
    print(f"\n{case} (MiB) | base | fw peak | saved | bw peak | step peak | end")
    for r in rows:
        print(f"{r['mode']:9s} | {r['base'] / MiB:8.1f} | {r['fw_peak'] / MiB:8.1f} | {r['saved'] / MiB:8.1f} | "
              f"{r['bw_peak'] / MiB:8.1f} | {r['step_peak'] / MiB:8.1f} | {r['end'] / MiB:8.1f}")
    for r in rows:
        sizes = collections.Counter(d for _, d in r["saved_list"])
        total = sum(b for b, _ in r["saved_list"])
        print(f"\n{r['mode']}: {len(r['saved_list'])} saved storages, {total / MiB:.1f} MiB; largest:")
        by_desc: dict[str, int] = collections.defaultdict(int)
        for b, d in r["saved_list"]:
            by_desc[d] += b
        for d, b in sorted(by_desc.items(), key=lambda kv: -kv[1])[:25]:
            print(f"  {b / MiB:9.1f} MiB  {sizes[d]:3d} x {d}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
