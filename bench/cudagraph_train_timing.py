"""Training step time of the Llama-style model with COIL_CUDA_GRAPHS_TRAINING off and on.

    python bench/cudagraph_train_timing.py [--batch 4 --seq 512] [--json out.json]

One process, same weights and inputs: eager, coil (knob off), coil (knob on). The step is
`zero_grad + forward (autocast bf16) + loss + backward` (bench_models' llama_style_train_amp,
no optimizer). Median of triton.testing.do_bench after warm-up. Also printed: the losses of the
first step (they must agree), the CUDA-graph runners coil built (captured or not, borrowed
inputs, calls that ran uncaptured under the liveness rule) and the peak memory of a warm step.
A small batch (--batch 1 --seq 128) is where launch overhead, hence CUDA graphs, matter most.
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import os
import sys
from typing import Any

os.environ.setdefault("COIL_GRAPH_CACHE", "0")  # compile each variant through the whole pipeline
os.environ.setdefault("COIL_AOT_CACHE", "0")


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--json", default="")
    a = p.parse_args(argv)

    import coil.backend as cb
    import torch
    from coil.backend import bench_models as bm
    from coil.backend.bench import _bench, _warm_peak
    from coil.backend.knobs import knobs
    from coil.runtime import cudagraph, segments

    made: list[Any] = []

    class Recording(cudagraph.CudaGraphRunner):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            made.append(self)

    cudagraph.CudaGraphRunner = Recording  # type: ignore[misc]
    segments.CudaGraphRunner = Recording  # type: ignore[misc]

    spec = bm.SPECS["llama_style"]
    base = bm._model(spec)
    g = torch.Generator(device="cuda").manual_seed(1)
    inputs = (torch.randint(0, base.config.vocab_size, (a.batch, a.seq), device="cuda", generator=g),)
    result: dict[str, Any] = {"model": spec.describe, "batch": a.batch, "seq": a.seq,
                              "gpu": torch.cuda.get_device_name(), "torch": torch.__version__}
    import triton

    result["triton"] = triton.__version__
    for label, on in (("eager", None), ("coil_graphs_off", False), ("coil_graphs_on", True)):
        torch._dynamo.reset()
        cb.reset()
        made.clear()
        model = copy.deepcopy(base)
        fn = model if on is None else torch.compile(model, backend="coil")
        with knobs.override(cuda_graphs_training=bool(on)):
            step = functools.partial(bm._train_step, spec, fn, inputs)
            first = step()
            torch.cuda.synchronize()
            ms = _bench(step, 20, 200)
            peak = _warm_peak(step)
        r: dict[str, Any] = {"first_loss": float(first), "ms": ms, "peak_mib": peak}
        if on is not None:
            r["graphs"] = [s.name for s in cb.COMPILED]
            r["segments"] = {s.name: s.cuda_graph_segments for s in cb.COMPILED if s.cuda_graph_segments}
            r["runners"] = [{"captured": x.graph is not None, "error": str(x.capture_error or ""),
                             "borrowed_inputs": len(x.borrowed), "static_outputs": len(x._alias_idx),
                             "uncaptured_calls": x.uncaptured_calls} for x in made]
        result[label] = r
        print(label, json.dumps(r), flush=True)
        del fn, model, step
        torch.cuda.empty_cache()
    off, on_ = result["coil_graphs_off"]["ms"], result["coil_graphs_on"]["ms"]
    print(f"step ms: eager {result['eager']['ms']:.2f}, coil off {off:.2f}, coil on {on_:.2f} "
          f"(on/off {on_ / off:.3f})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
