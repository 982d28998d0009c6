"""Distributed training compiled with backend="coil", on two gloo ranks on the CPU (Triton's
interpreter), against the same recipe run eagerly on the same ranks (ranks.py: same seed, same
data per rank; the model and the optimizer's step, SGD with momentum, compiled).

Each test runs one scenario of ranks.py in two fresh processes (launch.py) and asserts, on every
rank, that the compiled run's values (parameters after three steps, whole for DTensors; losses;
outputs) equal eager's within fp32 rounding, and that coil compiled every graph it was given:
with compile errors falling back to eager as users get them (COIL_FALLBACK_ON_ERROR on), no
graph ran eagerly. Scenarios known to fail are strict xfails with their error
(known_failures.py).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
import torch
import torch.distributed as dist

from . import launch
from .known_failures import KNOWN

pytestmark = pytest.mark.skipif(not (dist.is_available() and dist.is_gloo_available()),
                                reason="torch without distributed or gloo")

# fp32 throughout: coil's kernels sum in another order than ATen's (bias gradients, GELU's
# backward); three SGD steps keep those roundings near 1e-7
ATOL = 1e-5
RTOL = 1e-5

T = TypeVar("T", bound=Callable[..., Any])


def known(scenario: str) -> Callable[[T], T]:
    """A strict xfail with the known failure's reason, when `scenario` has one."""
    reason = KNOWN.get(scenario)
    if reason is None:
        return lambda f: f
    return pytest.mark.xfail(strict=True, reason=reason)


def _check(results: list[dict[str, Any]], optimizer: bool = True) -> None:
    """On every rank: coil compiled at least one graph (with `optimizer`, the optimizer's step
    too: a graph without autograd), none ran eagerly after a compile error, and every compiled
    value equals eager's."""
    for rank, res in enumerate(results):
        graphs = res["graphs"]
        assert graphs, f"rank {rank}: coil compiled no graph"
        if optimizer:
            assert any(g["name"].startswith("inference") for g in graphs), [g["name"] for g in graphs]
        eager = [f"{g['name']}: {g['eager_fallback']}" for g in graphs if g["eager_fallback"] is not None]
        assert not eager, f"rank {rank}: graphs ran eagerly after a compile error:\n" + "\n".join(eager)
        assert res["compiled"].keys() == res["eager"].keys()
        for name, want in res["eager"].items():
            torch.testing.assert_close(res["compiled"][name], want, atol=ATOL, rtol=RTOL,
                                       msg=lambda m, rank=rank, name=name: f"rank {rank}, {name}: {m}")


def _names(results: list[dict[str, Any]], rank: int) -> list[str]:
    return [g["name"] for g in results[rank]["graphs"]]


def _collectives(results: list[dict[str, Any]], rank: int) -> list[str]:
    """The functional collectives rank `rank`'s compiled wrappers call, graph by graph in
    compile order, each in the order its wrapper calls them."""
    return [c for g in results[rank]["graphs"] for c in g["collectives"]]


def _check_two_graph_pairs(results: list[dict[str, Any]]) -> None:
    """`_check`, and every rank compiled two forward graphs and two backward graphs."""
    _check(results)
    for rank in range(launch.WORLD):
        names = _names(results, rank)
        assert sum(n.startswith("forward") for n in names) == 2, names
        assert sum(n.startswith("backward") for n in names) == 2, names


@known("ddp")
def test_ddp_training_matches_eager(tmp_path: Path) -> None:
    """torch.compile of a DDP-wrapped MLP (per-rank data, 1 MiB buckets): after three steps every
    rank's parameters and losses equal eager DDP's; DDPOptimizer split the graph at the bucket
    boundary (two forward graphs a rank, each with its backward), and coil compiled all four."""
    _check_two_graph_pairs(launch.run("ddp", tmp_path))


@known("fsdp2")
def test_fsdp2_training_matches_eager(tmp_path: Path) -> None:
    """torch.compile of a 2-layer model under FSDP2 (`fully_shard` on each layer and the root;
    Dynamo runs FSDP2's hooks eagerly and compiles each layer's forward between them): after
    three steps every rank's parameters, gathered whole, and losses equal eager FSDP2's, and
    coil compiled both layers' forward and backward graphs."""
    _check_two_graph_pairs(launch.run("fsdp2", tmp_path))


@known("tensor_parallel")
def test_tensor_parallel_training_matches_eager(tmp_path: Path) -> None:
    """torch.compile of a column- then row-parallel feed-forward (parallelize_module over a
    2-rank DeviceMesh; its DTensor parameters reach coil as local shards plus the mesh, an opaque
    graph input): after three steps every rank's parameters, gathered whole, and losses equal
    eager's. The row-parallel output's all_reduce and its wait are in the forward graph coil
    compiled, and both ranks call them in the same order."""
    results = launch.run("tensor_parallel", tmp_path)
    _check(results)
    first = _collectives(results, 0)
    assert "_c10d_functional.all_reduce" in first, first
    assert all(_collectives(results, r) == first for r in range(launch.WORLD))


@known("functional")
def test_functional_collectives_match_eager_in_the_same_order_on_every_rank(tmp_path: Path) -> None:
    """A function of all_reduce, all_gather_tensor and reduce_scatter_tensor (with a matmul,
    pointwise work and reductions between them, and the all-reduced value read again after
    other buffers of its size were made) compiled as one graph: its outputs equal eager's on
    every rank, and every rank's compiled wrapper calls the same collectives, each followed by
    its wait, in program order, with the matmul that does not need the all-reduced value
    between the all-reduce and its wait."""
    results = launch.run("functional", tmp_path)
    _check(results, optimizer=False)
    expected = [f"_c10d_functional.{c}" for c in ("all_reduce", "wait_tensor", "all_gather_into_tensor",
                                                  "wait_tensor", "reduce_scatter_tensor", "wait_tensor")]
    for rank in range(launch.WORLD):
        assert _names(results, rank) == ["inference_0"]
        assert _collectives(results, rank) == expected, f"rank {rank}: {_collectives(results, rank)}"
        # overlap: the matmul, which does not need the all-reduced value, runs while it is in flight
        steps = results[rank]["graphs"][0]["steps"]
        launch_at, mm_at = steps.index("_c10d_functional.all_reduce"), steps.index("torch.mm")
        assert launch_at < mm_at < steps.index("_c10d_functional.wait_tensor"), steps


@pytest.mark.slow  # three torchrun launches; the recipes' correctness is the tests above, in CI
def test_the_distributed_bench_rows_match_eager_and_report_the_rule(tmp_path: Path) -> None:
    """`coil.bench.distributed` (what bench/gpu_distributed.sh runs with torchrun on GPUs), on two
    gloo ranks with the tiny Llama-style model under FSDP2: the eager, fp64 and coil rows have
    no error, three losses each, coil ran no graph eagerly, and the report passes coil's losses by
    the bench's rule. coil's run also profiles the host (`--host-profile`: every rank steps, rank 0
    prints) and ends."""
    import json
    import subprocess
    import sys

    from coil.bench.distributed import report

    out = tmp_path / "rows"
    for mode in ("eager", "fp64", "coil"):
        env = {**launch.environment(tmp_path / mode), "PYTHONUNBUFFERED": "1"}
        host = ["--host-profile", "1"] if mode == "coil" else []
        done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "-m",
                               "coil.bench.distributed", "--cpu", "--recipe", "fsdp2", "--model", "llama_style",
                               "--mode", mode, "--tiny", "--batch", "2", "--seq", "16", "--steps", "3", "--out", str(out),
                               *host], env=env, check=True, timeout=launch.DEADLINE_S, capture_output=True, text=True)
        if host:
            assert done.stdout.count("=== cProfile of 1 steps on rank 0") == 1, done.stdout[-2000:]
    rows = [json.loads(p.read_text()) for p in sorted(out.glob("*.json"))]
    assert len(rows) == 6 and all("error" not in r and len(r["losses"]) == 3 for r in rows), rows
    coil_rows = [r for r in rows if r["mode"] == "coil"]
    assert all(r["graphs_compiled"] > 0 and r["graphs_eager"] == 0 for r in coil_rows), coil_rows
    table = report(out)
    coil_row = next(line for line in table.splitlines() if line.startswith("| coil |"))
    assert "(pass)" in coil_row, table
