"""Pointwise results read at another index are not materialised (lowering_ir.inline, COIL_INLINE)
and nll_loss_backward's scatter into zeros is a where (fx_passes.scatter_to_where): the loss
graphs allocate no [N, V] buffer but the logits' gradient, and results equal eager's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import coil.backend.pipeline.compile as compile_mod
import pytest
import torch
import torch.nn.functional as F
from coil.backend import COMPILED
from coil.knobs import knobs
from coil.wrapper_codegen import Allocate

N, V = 12, 37


@pytest.fixture
def allocations(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[Allocate]]:
    """The Allocate lines of every graph's wrapper program, by graph name (build is wrapped)."""
    got: dict[str, list[Allocate]] = {}
    build = compile_mod.build

    def spy(sched: Any, *args: Any, **kwargs: Any) -> Any:
        program = build(sched, *args, **kwargs)
        got[COMPILED[-1].name] = [ln for ln in program.lines if isinstance(ln, Allocate)]
        return program

    monkeypatch.setattr(compile_mod, "build", spy)
    return got


def _full(lines: list[Allocate], dtype: torch.dtype = torch.float32) -> list[Allocate]:
    return [a for a in lines if tuple(int(s) for s in a.size) == (N, V) and a.dtype == dtype]


def _run(fn: Callable[..., torch.Tensor], *inputs: torch.Tensor, grad: bool = False) -> None:
    """Compiled (strict, no graph cache) and eager results (and input gradients) agree."""
    cmp = [x.detach().clone().requires_grad_(grad and x.is_floating_point()) for x in inputs]
    ref = [x.detach().clone().requires_grad_(grad and x.is_floating_point()) for x in inputs]
    with knobs.override(fallback_on_error=False, graph_cache=False):
        out = torch.compile(fn, backend="coil")(*cmp)
        if grad:
            out.float().square().sum().backward()
    want = fn(*ref)
    torch.testing.assert_close(out, want)
    if grad:
        want.float().square().sum().backward()
        for a, b in zip(cmp, ref, strict=True):
            if b.grad is not None:
                torch.testing.assert_close(a.grad, b.grad)
    assert [f for s in COMPILED for f in s.fallbacks] == []


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cross_entropy_allocates_no_logits_sized_buffer(device: torch.device, dtype: torch.dtype,
                                                       allocations: dict[str, list[Allocate]]) -> None:
    torch.manual_seed(0)
    logits = torch.randn(N, V, device=device, dtype=dtype, requires_grad=True)
    target = torch.randint(0, V, (N,), device=device)
    target[3] = -100  # an ignored row
    ref = logits.detach().clone().requires_grad_()
    with knobs.override(fallback_on_error=False, graph_cache=False):
        loss = torch.compile(lambda x, t: F.cross_entropy(x.float(), t), backend="coil")(logits, target)
        loss.backward()
    want = F.cross_entropy(ref.float(), target)
    want.backward()
    torch.testing.assert_close(loss, want)
    assert logits.grad is not None and ref.grad is not None
    torch.testing.assert_close(logits.grad, ref.grad)
    names = [s.name for s in COMPILED]
    fw = next(n for n in names if n.startswith("forward"))
    bw = next(n for n in names if n.startswith("backward"))
    assert _full(allocations[fw]) == []  # log_softmax's output is read only by the gather
    # the backward allocates the gradient only (fp32 logits: it is the output; bf16 logits: the
    # output is bf16 and the fp32 gradient stays in registers)
    assert len(_full(allocations[bw])) == (1 if dtype == torch.float32 else 0)
    assert len(_full(allocations[bw], dtype)) == 1
    assert not any("scatter" in o for s in COMPILED for k in s.kernel_origins for o in k)
    assert [f for s in COMPILED for f in s.fallbacks] == []


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def _rope(q: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    return q * cos + _rotate_half(q) * sin


def test_rotary_embedding_neg_is_no_kernel_of_its_own(device: torch.device, monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(0)
    q = torch.randn(2, 3, 5, 8, device=device)
    cos, sin = torch.randn(5, 8, device=device), torch.randn(5, 8, device=device)
    counts = {}
    for flag in ("0", "1"):
        monkeypatch.setenv("COIL_INLINE", flag)
        torch._dynamo.reset()
        first = len(COMPILED)
        _run(_rope, q, cos, sin)
        counts[flag] = sum(s.kernels for s in COMPILED[first:])
        origins = [o for s in COMPILED[first:] for k in s.kernel_origins for o in k]
        if flag == "1":
            assert ["neg"] not in [k for s in COMPILED[first:] for k in s.kernel_origins]
            assert "neg" in origins  # it runs inside the cat's kernel
    assert counts["1"] < counts["0"]


CASES: dict[str, tuple[Callable[..., torch.Tensor], Callable[[torch.device], tuple[torch.Tensor, ...]]]] = {
    "gather_log_softmax": (lambda x, t: torch.gather(torch.log_softmax(x, 1), 1, t[:, None]),
                           lambda d: (torch.randn(N, V, device=d), torch.randint(0, V, (N,), device=d))),
    "pad_of_exp": (lambda x: F.pad(x.exp(), (1, 2, 2, 0), value=-1.0) * 2, lambda d: (torch.randn(4, 6, device=d),)),
    "index_select_flat": (lambda x, i: torch.index_select((x * 2 + 1).reshape(-1), 0, i),
                          lambda d: (torch.randn(4, 6, device=d), torch.tensor([0, 5, 6, 23, 17, 3], device=d))),
    "transposed": (lambda x: (x.sin() * 3).t().contiguous() + 1, lambda d: (torch.randn(5, 7, device=d),)),
    "transposed_sum": (lambda x: (x.sin() * 3).t().sum(1), lambda d: (torch.randn(5, 7, device=d),)),
    "embedding_transposed": (lambda w, i: F.embedding(i, w).t() * 2,
                             lambda d: (torch.randn(9, 4, device=d), torch.tensor([3, 0, 8, 3, 1], device=d))),
    "half_gather": (lambda x, t: torch.gather((x * 3.3).half() * 1.7, 1, t),
                    lambda d: (torch.randn(4, 8, device=d), torch.randint(0, 8, (4, 3), device=d))),
    "stencil": (lambda x: (x.exp()[1:] - x.exp()[:-1]).cos()[::2], lambda d: (torch.randn(11, 3, device=d),)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_inlined_reads_equal_eager(name: str, device: torch.device) -> None:
    fn, make = CASES[name]
    torch.manual_seed(0)
    _run(fn, *make(device))


def test_scatter_value_into_zeros_is_fused(device: torch.device) -> None:
    """The rewritten scatter (one value per row, into a fill) equals eager, also of src."""
    torch.manual_seed(0)
    t = torch.randint(0, V, (N, 1), device=device)
    s = torch.randn(N, 1, device=device)
    _run(lambda t: torch.full((N, V), 0.5, device=t.device).scatter(1, t, -2.0) + 1, t)
    _run(lambda t, s: torch.zeros(N, V, device=t.device).scatter(1, t, s).exp(), t, s)
    _run(lambda t: torch.zeros(V, N, device=t.device).scatter(0, t.t(), 3.0) * 2, t)
    assert not any("scatter" in o for s in COMPILED for k in s.kernel_origins for o in k)
