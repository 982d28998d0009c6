"""Where a training step's memory goes with and without coil's training CUDA graphs.

    python bench/train_graph_memory.py CASE [CONFIG ...]    (CASE: a `coil bench` training case,
                                                            CONFIG: inductor, coil_off, coil_on)
    python bench/train_graph_memory.py --one CASE,CASE CONFIG   (several cases in one process, one
                                                            after another, logging uncaptured calls)

Each CONFIG runs in its own process (a clean allocator): the model is compiled (`inductor`:
`torch.compile` default; `coil_off`: backend="coil" with COIL_CUDA_GRAPHS_TRAINING=0; `coil_on`:
with it on), three warm steps run, then it prints one JSON line with the step's median time
(`triton.testing.do_bench`), the warm peak as `coil bench` measures it (max reserved and max
allocated over one step after `empty_cache`), the memory held after a step by memory pool (the
caching allocator's snapshot: reserved and allocated bytes per `segment_pool_id`; (0, 0) is the
ordinary allocator, others are CUDA-graph pools), and for coil_on every CUDA-graph runner: its
pool, what it keeps (static outputs), what it copies in per call (copied inputs that are not
borrowed) and what it clones out per call.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

MiB = 1 << 20
CONFIGS = ("inductor", "coil_off", "coil_on")


def _nbytes(t: Any) -> int:
    import torch

    return t.untyped_storage().nbytes() if isinstance(t, torch.Tensor) else 0


def _unique_bytes(ts: Any) -> int:
    import torch

    seen: dict[int, int] = {}
    for t in ts:
        if isinstance(t, torch.Tensor) and t.is_cuda:
            seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
    return sum(seen.values())



def _runner(r: Any, pool_ids: dict[int, int]) -> dict[str, Any]:
    copied = [i for i in r._copy_idx if i not in r.borrowed] if hasattr(r, "_copy_idx") else []
    statics = getattr(r, "_static_inputs", [])
    outs = r.graph_outputs
    alias = set(r._alias_idx)
    return {
        "captured": r.graph is not None, "error": str(r.capture_error or "")[:200],
        "pool": pool_ids.setdefault(id(r._pool), len(pool_ids)),
        "inputs": r._n, "static_inputs": len(r.static_indices), "borrowed": len(r.borrowed),
        "copied": len(copied), "copied_mib": round(sum(_nbytes(statics[i]) for i in copied) / MiB, 1)
        if statics else 0.0,
        "outputs": len(outs), "handed_out": len(alias),
        "held_outputs_mib": round(_unique_bytes(outs) / MiB, 1),
        "cloned_per_call_mib": round(sum(_nbytes(o) for k, o in enumerate(outs) if k not in alias) / MiB, 1)
        if r.clone_outputs else 0.0,
        "uncaptured_calls": r.uncaptured_calls,
    }


def measure(case: str, config: str) -> dict[str, Any]:
    if config not in CONFIGS:
        raise SystemExit(f"unknown config {config!r} (known: {', '.join(CONFIGS)})")
    os.environ["COIL_CUDA_GRAPHS_TRAINING"] = "1" if config == "coil_on" else "0"
    import coil.backend  # noqa: F401  (registers backend="coil")
    import torch
    import triton
    from coil.backend import bench_models as bm
    from coil.backend.bench import _bench, _warm_peak, memory_by_pool
    from coil.runtime import cudagraph, segments

    made: list[Any] = []
    original = cudagraph.CudaGraphRunner

    class Recording(original):  # type: ignore[misc,valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            made.append(self)

    cudagraph.CudaGraphRunner = Recording  # type: ignore[misc]
    segments.CudaGraphRunner = Recording  # type: ignore[misc]

    spec, kind = bm._split(case)
    assert kind == "train_amp", "training cases only"
    model = bm._model(spec)
    inputs = spec.inputs(model)
    f = bm.compile_mode(model, "inductor" if config == "inductor" else "coil")

    def step() -> Any:
        return bm._train_step(spec, f, inputs)

    losses = [float(step()) for _ in range(3)]
    torch.cuda.synchronize()
    ms = _bench(step, 10, 100)
    peak = _warm_peak(step)
    torch.cuda.synchronize()
    res: dict[str, Any] = {
        "case": case, "config": config, "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
        "triton": triton.__version__, "losses": losses, "ms": round(ms, 3),
        "peak_reserved_mib": round(peak["peak_mib"], 1), "peak_allocated_mib": round(peak["peak_allocated_mib"], 1),
        "params_mib": round(sum(p.numel() * p.element_size() for p in model.parameters()) / MiB, 1),
        "after_step_by_pool": memory_by_pool(),
    }
    if config != "inductor":
        import coil.backend as cb

        res["graphs"] = [s.name for s in cb.COMPILED]
    if made:
        pool_ids: dict[int, int] = {}
        res["runners"] = [_runner(r, pool_ids) for r in made]
    # the next case in this process (--one A,B) must not keep this one's runners alive
    cudagraph.CudaGraphRunner = original  # type: ignore[misc]
    segments.CudaGraphRunner = original  # type: ignore[misc]
    made.clear()
    return res


def main(argv: list[str]) -> int:
    if len(argv) >= 3 and argv[0] == "--one":  # CASE[,CASE...] CONFIG: the cases one after another
        import logging

        from coil.backend.bench_models import _release

        logging.basicConfig(level=logging.WARNING)
        logging.getLogger("coil.runtime").setLevel(logging.INFO)  # why a call ran uncaptured
        for case in argv[1].split(","):
            print("RESULT " + json.dumps(measure(case, argv[2])), flush=True)
            _release(None)  # Dynamo's code, garbage, cached blocks: as coil bench between modes
        return 0
    if not argv:
        raise SystemExit(__doc__)
    case, configs = argv[0], argv[1:] or list(CONFIGS)
    rc = 0
    for config in configs:
        p = subprocess.run([sys.executable, __file__, "--one", case, config], capture_output=True, text=True)
        lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
        if p.returncode or not lines:
            rc = 1
            print(json.dumps({"case": case, "config": config, "error": p.stderr[-1500:]}), flush=True)
        else:
            print(lines[-1].removeprefix("RESULT "), flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
