"""bench/kernel_census.py counts the kernels coil makes for a zoo model's graphs without a GPU.

Oracle: a real compile. The census runs coil's pipeline for the CUDA target on fake tensors,
so it is checked against `torch.compile(backend="coil")` where the two must agree: BERT's tiny
inference graph, at a size where no rule that depends on the device applies (no product is
large enough to pad, no reduction to split), traced whole by Dynamo (one graph).
"""

from __future__ import annotations

import runpy
from pathlib import Path

import torch
from coil.backend import COMPILED
from coil.bench import zoo

CENSUS = Path(__file__).parents[1] / "bench" / "kernel_census.py"


def test_the_census_counts_what_a_compile_makes() -> None:
    trace = runpy.run_path(str(CENSUS), run_name="kernel_census")["trace"]
    (kind, counts), = trace("bert", "infer", "tiny")
    assert kind == "inference"
    model, inputs = zoo.build("bert", "tiny", torch.device("cpu"), torch.bfloat16)
    model.eval()
    with torch.no_grad():
        zoo.forward("bert", torch.compile(model, backend="coil"), inputs)
    (graph,) = COMPILED
    assert graph.eager_fallback is None
    assert (sum(counts["kernels"].values()), sum(counts["externs"].values())) == (graph.kernels, graph.externs)
    assert graph.extern_ops == dict(counts["externs"])  # the extern calls by op, as the compile records them
    assert graph.kernels > 0 and graph.externs > 0
