"""A graph compiled once and called per layer replays as CUDA graphs at every layer (GPU only).

Dynamo compiles one graph for a block that a model calls in a loop when the loop cannot be traced
whole (a graph break between layers, as HF's BART and OPT have in training): that graph then runs
once per layer with each layer's parameters. coil captures one CUDA graph per call site (set of
static-input addresses), so every layer replays; one runner for all layers would see its static
inputs move at the second layer and run every later call's kernels one by one.

Checks, over 3 optimizer steps of a 4-block model against an identical eager copy (fp32):
losses, gradients and parameters equal; and, from the second step on, no compiled graph ran
uncaptured (one capture per block for the forward and for the backward). Inference likewise,
with the outputs of earlier calls kept while later ones replay. A graph with symbolic sizes
(`dynamic=True`) captures once per size met, training and inference.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from coil.backend.stats import COMPILED
from torch import nn

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device (none found)"),
]

BLOCKS = 4


class Block(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.norm(x))))


class Stack(nn.Module):
    """BLOCKS blocks with a graph break between them: one compiled graph serves every block."""

    def __init__(self, d: int = 64) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block(d) for _ in range(BLOCKS))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            torch._dynamo.graph_break()
            x = block(x)
        return x


def _x(step: int) -> torch.Tensor:
    return torch.randn(32, 64, generator=torch.Generator().manual_seed(step)).cuda()


def test_training_replays_at_every_block(runners: list[Any]) -> None:
    torch.manual_seed(0)
    eager = Stack().cuda()
    mine = copy.deepcopy(eager)
    compiled = torch.compile(mine, backend="coil")
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (eager, mine)]
    uncaptured_after_first = 0
    for step in range(3):
        for model, fn, opt in ((eager, eager, opts[0]), (mine, compiled, opts[1])):
            opt.zero_grad()
            loss = fn(_x(step)).pow(2).mean()
            loss.backward()
            opt.step()
            if model is eager:
                want = loss.item()
            else:
                torch.testing.assert_close(loss.item(), want, rtol=1e-4, atol=1e-5)
        if step == 0:
            uncaptured_after_first = sum(r.uncaptured_calls for r in runners)
    for (name, p), q in zip(mine.named_parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5, msg=lambda m, n=name: f"{n}: {m}")
    names = [s.name.split("_")[0] for s in COMPILED]
    # the first block's graph (its input needs no gradient) and one graph for the other three
    assert names.count("forward") < BLOCKS and names.count("backward") < BLOCKS, names
    blocks = [r for r in runners if r.static_indices]  # the block graphs' sites (they read parameters)
    assert len(blocks) == 2 * BLOCKS, f"one forward and one backward capture per block, got {len(blocks)}"
    assert all(r.graph is not None and r.capture_error is None for r in blocks), \
        [str(r.capture_error) for r in blocks]
    assert sum(r.uncaptured_calls for r in runners) == uncaptured_after_first == 0


def test_inference_replays_at_every_block_and_kept_outputs_stay(runners: list[Any]) -> None:
    torch.manual_seed(0)
    model = Stack().cuda().eval()
    compiled = torch.compile(model, backend="coil")
    kept = []
    with torch.no_grad():
        for step in range(3):
            x = _x(step)
            kept.append((compiled(x), model(x)))
    for got, want in kept:
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    assert [s.name.split("_")[0] for s in COMPILED] == ["inference"]  # one graph serves every block
    blocks = [r for r in runners if r.static_indices]
    assert len(blocks) == BLOCKS and all(r.graph is not None for r in blocks)
    assert sum(r.uncaptured_calls for r in runners) == 0


@pytest.mark.parametrize("train", [False, True], ids=["inference", "training"])
def test_symbolic_sizes_replay_per_size(runners: list[Any], train: bool) -> None:
    torch.manual_seed(0)
    eager = Block(64).cuda().train(train)
    mine = copy.deepcopy(eager)
    compiled = torch.compile(mine, backend="coil", dynamic=True)
    for step in range(3):
        for rows in (16, 48):
            x = torch.randn(rows, 64, generator=torch.Generator().manual_seed(step * 100 + rows)).cuda()
            with torch.set_grad_enabled(train):
                got, want = compiled(x), eager(x)
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
            if train:
                got.pow(2).mean().backward()
                want.pow(2).mean().backward()
    for (name, p), q in zip(mine.named_parameters(), eager.parameters(), strict=True):
        if train:
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=lambda m, n=name: f"{n}: {m}")
    assert len(COMPILED) == (2 if train else 1), [s.name for s in COMPILED]  # one graph serves both sizes
    captured = [r for r in runners if r.graph is not None]
    assert len(captured) == (4 if train else 2), "one capture per size (and per graph)"
    assert sum(r.uncaptured_calls for r in runners) == 0
