"""Kernels fused as siblings (coil.scheduler.fusion: readers of one kernel's outputs that share
no buffer, one launch for both) compute what eager computes.

Two column sums finished in two stages, as the split rule writes a layer norm's weight and bias
gradients: one kernel reduces chunks of rows into two partials, and the two finishing sums read
one partial each. As siblings they are one kernel (two with sibling fusion bounded to nothing,
SIBLING_MAX_OPS = 1: three kernels), and the sums equal eager's in fp64.
"""

from __future__ import annotations

import pytest
import torch
from check import compiled_anew
from coil.scheduler import fusion


def _split_sums(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    chunks = x.view(8, -1, x.shape[-1])
    return chunks.sum(1).sum(0), (chunks * chunks).sum(1).sum(0)


def _compiled_kernels(x: torch.Tensor) -> tuple[int, tuple[torch.Tensor, ...]]:
    (graph,), got = compiled_anew(_split_sums, lambda f: f(x))
    return graph.kernels, got


def test_finishing_sums_of_one_kernels_partials_share_a_kernel(device: torch.device,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fusion, "COMBO_MAX_PARTS", 1)  # the sums are graph outputs: a combo would take them apart
    x = torch.randn(256, 32, device=device)
    want = _split_sums(x.double())
    kernels, got = _compiled_kernels(x)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g.double(), w, atol=1e-4, rtol=1e-4)
    monkeypatch.setattr(fusion, "SIBLING_MAX_OPS", 1)
    apart, _ = _compiled_kernels(x)
    assert (kernels, apart) == (2, 3)
