"""A model on a CUDA device other than the current one (one process driving two GPUs, no
`torch.cuda.set_device`): compiled with backend="coil", with and without CUDA graphs, it runs on
its own device and equals eager, forward and backward, and the caller's current device is left
as it was (coil.backend.pipeline.device_guard)."""

from __future__ import annotations

import pytest
import torch
from coil.backend import COMPILED
from coil.knobs import knobs
from torch import nn

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.two_gpus,
    pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                       reason="needs two CUDA devices visible (bench/gpu_tests.sh on nvidia-h200-x2 runs it)"),
]


@pytest.mark.parametrize("cuda_graphs", [False, True])
def test_a_model_on_the_second_gpu_runs_there_and_equals_eager(cuda_graphs: bool) -> None:
    torch.cuda.set_device(0)
    dev = torch.device("cuda", 1)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.LayerNorm(128), nn.Linear(128, 32)).to(dev)
    x = torch.randn(16, 64, device=dev)
    want = model(x)
    want.square().mean().backward()
    want_grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
    model.zero_grad(set_to_none=True)
    first = len(COMPILED)
    with knobs.override(cuda_graphs=cuda_graphs, cuda_graphs_training=cuda_graphs, fallback_on_error=False):
        compiled = torch.compile(model, backend="coil")
        for _ in range(3):  # warm-up, capture (with CUDA graphs) and a replay
            model.zero_grad(set_to_none=True)
            got = compiled(x)
            got.square().mean().backward()
    assert torch.cuda.current_device() == 0
    assert got.device == dev
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert len(grads) == len(want_grads)
    for g, w in zip(grads, want_grads, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)
    assert COMPILED[first:] and all(g.kernels > 0 for g in COMPILED[first:])
