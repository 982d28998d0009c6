"""Pointwise kernels that store over a buffer they read for the last time, end to end
(backend="coil", Triton kernels; the CPU interpreter here, CUDA where there is one).

A kernel that reads a dying buffer only at the index where it stores takes that buffer's storage
for its store (wrapper-codegen `inplace_pointwise`): a convolution's or a product's result under
its epilogue, one activation fewer live. Read at any other index as well (transposed, flipped),
or read by a later step, the buffer keeps its storage: a kernel writing over it would overwrite
elements that another program still has to read. On the GPU the sizes span several programs, so
a wrong in-place store would change the values (the interpreter runs these kernels as one
program). Oracle: eager PyTorch on the same inputs; the wrapper source shows which kernels
wrote in place (a launch passing one variable for two pointers).
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
import torch
from coil.backend import COMPILED
from coil.knobs import knobs


def _inplace_launches() -> int:
    """Kernel launches in the compiled wrappers that pass one buffer for two pointers."""
    count = 0
    for s in COMPILED:
        for line in s.wrapper_source.splitlines():
            m = re.match(r"\s*k_\w+\(\(.*?\), (.*)\)$", line)
            if m is None:
                continue
            args = [a for a in m.group(1).split(", ") if re.fullmatch(r"buf\w+", a)]
            count += len(args) != len(set(args))
    return count


class Block(torch.nn.Module):
    """A ResNet bottleneck in eval mode: convolution, batch norm, ReLU, and the residual add."""

    def __init__(self, c: int = 16, mid: int = 8) -> None:
        super().__init__()
        self.c1, self.b1 = torch.nn.Conv2d(c, mid, 1, bias=False), torch.nn.BatchNorm2d(mid)
        self.c2, self.b2 = torch.nn.Conv2d(mid, c, 3, padding=1, bias=False), torch.nn.BatchNorm2d(c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.b1(self.c1(x)))
        return torch.relu(self.b2(self.c2(y)) + x)


def epilogue(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.gelu(x @ w + b) * 2


def read_transposed(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    m = x @ w
    return m.t() * 2 + m + b


def read_flipped(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    m = x @ w
    return torch.sigmoid(m) + m.flip(0) + b


def read_later(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    m = x @ w
    return torch.relu(m + b) @ w + m  # the product reads m after the ReLU's kernel


FORMS: dict[str, tuple[Callable[..., torch.Tensor], bool]] = {
    "epilogue": (epilogue, True),
    "read_transposed": (read_transposed, False),
    "read_flipped": (read_flipped, False),
}


def _run(fn: Callable[..., torch.Tensor], device: torch.device) -> None:
    """`fn` compiled on a product's inputs, against eager; COMPILED holds what it compiled."""
    torch.manual_seed(0)
    x, w, b = (torch.randn(256, 256, device=device), torch.randn(256, 256, device=device),
               torch.randn(256, device=device))
    COMPILED.clear()
    with knobs.override(fallback_on_error=False):
        got = torch.compile(fn, backend="coil")(x, w, b)
    torch.testing.assert_close(got, fn(x, w, b), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", sorted(FORMS))
def test_products_epilogues_in_place_only_where_each_element_is_read_once(name: str,
                                                                         device: torch.device) -> None:
    fn, in_place = FORMS[name]
    _run(fn, device)
    if in_place:
        assert _inplace_launches() >= 1, [s.wrapper_source for s in COMPILED]
    else:
        assert _inplace_launches() == 0, [s.wrapper_source for s in COMPILED]


def test_read_later_keeps_the_buffer_the_product_reads(device: torch.device) -> None:
    """The ReLU's kernel reads m for the last time but the final add reads it after the second
    product: m stays; only the final add, its last reader, may take its storage."""
    _run(read_later, device)
    (source,) = [s.wrapper_source for s in COMPILED]
    lines = source.splitlines()
    product = next(i for i, ln in enumerate(lines) if "torch.mm(" in ln)
    relu = next(ln for ln in lines[product:] if re.match(r"\s*k_\w+\(", ln))  # the first kernel after it
    args = re.findall(r"\bbuf\w+", relu)
    assert len(args) == len(set(args)), source


def test_resnet_blocks_write_each_epilogue_over_its_convolution(device: torch.device) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(Block(), Block()).to(device).eval()
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):  # statistics other than the initial ones
            m.running_mean.uniform_(-1, 1)
            m.running_var.uniform_(0.5, 2)
    x = torch.randn(2, 16, 12, 12, device=device)
    COMPILED.clear()
    with torch.no_grad(), knobs.override(fallback_on_error=False):
        got = torch.compile(model, backend="coil")(x)
        want = model(x)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert _inplace_launches() >= 3, [s.wrapper_source for s in COMPILED]  # one per convolution but the last
