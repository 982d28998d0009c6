"""Scatters in place, end to end (backend="coil", Triton kernels; the CPU interpreter here).

A Scatter (index_put, scatter, put) whose base dies at it writes into the base's storage
instead of a copy (wrapper-codegen `inplace_scatters`), and a tied embedding's gradient
accumulates into the output projection's gradient (fx-passes `accumulate_into_addend`).
Oracle: eager PyTorch on the same inputs; the wrapper source shows which scatters skipped
their init kernel (a copy of the base).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from coil.backend import COMPILED
from coil.knobs import knobs


def _compiled(fn: Callable[..., object], *args: torch.Tensor) -> object:
    with knobs.override(fallback_on_error=False):
        return torch.compile(fn, backend="coil")(*args)


def _init_launches() -> int:
    return sum(line.count("_init((") for s in COMPILED for line in s.wrapper_source.splitlines())


def _ids(device: torch.device) -> torch.Tensor:
    return torch.tensor([0, 4, 4, 4, 9, 2], device=device)  # duplicates: their rows add up


def dying_base(x: torch.Tensor, i: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    y = torch.exp(x)  # a kernel store that no one reads after the index_put
    return torch.index_put(y, (i,), v, accumulate=True) * 3


def chained(x: torch.Tensor, i: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    y = torch.index_put(torch.exp(x), (i,), v, accumulate=True)
    return torch.index_put(y, (i.flip(0),), v * 2, accumulate=True) - 1


def base_returned(x: torch.Tensor, i: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    y = torch.exp(x)
    return torch.index_put(y, (i,), v, accumulate=True), y


def read_in_any_order(x: torch.Tensor, i: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    y = torch.exp(x)  # its row sums can run before the index_put, which then writes in place
    return torch.index_put(y, (i,), v, accumulate=True) * y.sum(1, keepdim=True)


def read_with_result(x: torch.Tensor, i: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    y = torch.exp(x)  # read together with the index_put's result: a copy
    return torch.index_put(y, (i,), v, accumulate=True) * y


def input_base(x: torch.Tensor, i: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return torch.index_put(x, (i,), v, accumulate=True) * 2  # the caller's x is left alone


def scatter_add_dim1(x: torch.Tensor, i: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    y = x * 2
    return torch.scatter_add(y, 1, i[:, None].expand(6, 3) % 3, v) + 1


CASES = {  # name: (function, how many scatters write in place)
    "dying_base": (dying_base, 1),
    "chained": (chained, 2),
    "read_in_any_order": (read_in_any_order, 1),
    "scatter_add_dim1": (scatter_add_dim1, 1),
    "base_returned": (base_returned, 0),
    "read_with_result": (read_with_result, 0),
    "input_base": (input_base, 0),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_scatter_in_place_equals_eager(device: torch.device, name: str) -> None:
    fn, in_place = CASES[name]
    torch.manual_seed(0)
    x, v = torch.randn(10, 3, device=device), torch.randn(6, 3, device=device)
    x_before = x.clone()
    got = _compiled(fn, x, _ids(device), v)
    torch.testing.assert_close(got, fn(x, _ids(device), v))
    torch.testing.assert_close(x, x_before, rtol=0, atol=0)
    scatters = sum(line.count("_scatter((") for s in COMPILED for line in s.wrapper_source.splitlines())
    assert scatters == (2 if name == "chained" else 1)
    assert _init_launches() == scatters - in_place


class TiedLM(torch.nn.Module):
    """GPT-2's tie in small: one [V, D] weight for the token lookup and the output projection."""

    def __init__(self, vocab: int = 37, dim: int = 8) -> None:
        super().__init__()
        self.wte = torch.nn.Embedding(vocab, dim)
        self.wpe = torch.nn.Embedding(16, dim)
        self.mix = torch.nn.Linear(dim, dim)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(ids.shape[1], device=ids.device)
        h = torch.tanh(self.mix(self.wte(ids) + self.wpe(pos)))
        logits = h @ self.wte.weight.t()
        return F.cross_entropy(logits.flatten(0, 1), ids.flatten())


def test_tied_embedding_gradient_accumulates_in_place(device: torch.device) -> None:
    torch.manual_seed(0)
    ref = TiedLM().to(device)
    model = TiedLM().to(device)
    model.load_state_dict(ref.state_dict())
    ids = torch.randint(0, 37, (3, 12), device=device)
    ids[:, :4] = 5  # one token many times
    with knobs.override(fallback_on_error=False):
        loss = torch.compile(model, backend="coil")(ids)
    loss.backward()
    want = ref(ids)
    want.backward()
    torch.testing.assert_close(loss, want)
    for (name, p), q in zip(model.named_parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=f"gradient of {name}")
    (backward,) = [s for s in COMPILED if s.name.startswith("backward")]
    assert backward.eager_fallback is None
    lines = backward.wrapper_source.splitlines()
    scatters = sum(line.count("_scatter((") for line in lines)
    # wte's gradient accumulates into the projection's part, wpe's into its zeros: no copies
    assert scatters == 2
    assert sum(line.count("_init((") for line in lines) == 0
