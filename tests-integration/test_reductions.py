"""Reductions: each strategy forced and checked, multi-reduction kernels, arg-reductions, scans."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
import torch
from coil.backend import COMPILED, knobs


def _strategies() -> list[str]:
    found: list[str] = []
    for s in COMPILED:
        for src in s.kernel_sources.values():
            m = re.search(r"# kernel \w+: (\w+);", src)
            assert m is not None, src[:200]
            found.append(m.group(1))
    return found


def _run(fn: Callable[..., object], *args: torch.Tensor, strategy: str = "auto") -> None:
    with knobs.override(fallback_on_error=False, reduction_strategy=strategy):
        out = torch.compile(fn, backend="coil")(*args)
    torch.testing.assert_close(out, fn(*args))
    assert [f for s in COMPILED for f in s.fallbacks] == []


def _softmax_and_sums(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return x.softmax(-1), x.sum(0), torch.var_mean(x, 1), x.amax(1)


@pytest.mark.parametrize("strategy", ["persistent", "looped"])
def test_forced_strategy_runs_and_is_the_one_generated(strategy: str, device: torch.device) -> None:
    _run(_softmax_and_sums, torch.randn(6, 300, device=device), strategy=strategy)
    kinds = _strategies()
    assert "pointwise" not in kinds or len(kinds) > 1
    assert {k for k in kinds if k != "pointwise"} == {strategy}, kinds


def test_auto_picks_looped_for_long_rows(device: torch.device) -> None:
    _run(lambda x: x.sum(1), torch.randn(2, 1 << 15, device=device))
    assert _strategies() == ["looped"]


def test_split_reduction_makes_two_kernels(monkeypatch: pytest.MonkeyPatch, device: torch.device) -> None:
    monkeypatch.setenv("COIL_SPLIT_REDUCTION_MIN", "1000")
    _run(lambda x: x.sum(1), torch.randn(3, 5000, device=device))
    # the sum's FX node is computed by two kernels: partials over chunks of each row, then their sum
    origins = COMPILED[0].kernel_origins
    assert len(origins) == 2 and all(any(o.startswith("sum") for o in k) for k in origins), origins
    monkeypatch.setenv("COIL_SPLIT_REDUCTION_MIN", str(1 << 30))
    torch._dynamo.reset()
    COMPILED.clear()
    _run(lambda x: x.sum(1), torch.randn(3, 5000, device=device))
    assert len(COMPILED[0].kernel_origins) == 1  # the same reduction, unsplit


def test_several_reductions_share_one_kernel(device: torch.device) -> None:
    # softmax: max and sum over the same rows, and the normalisation, in one kernel
    _run(lambda x: x.softmax(-1), torch.randn(4, 50, device=device))
    assert sum(s.kernels for s in COMPILED) == 1
    src = next(iter(COMPILED[0].kernel_sources.values()))
    assert "tl.max(" in src and "tl.sum(" in src


@pytest.mark.parametrize("strategy", ["persistent", "looped"])
def test_arg_reductions(strategy: str, device: torch.device) -> None:
    x = torch.randn(5, 37, device=device)
    x[2] = 1.0  # ties: the first index wins, as in eager
    _run(lambda t: (t.argmax(1), t.argmin(0, keepdim=True), t.argmax(), t.max(1), t.min(dim=0)), x, strategy=strategy)


@pytest.mark.parametrize("strategy", ["persistent", "looped"])
def test_scans(strategy: str, device: torch.device) -> None:
    x = torch.randn(5, 37, device=device)
    _run(lambda t: (torch.cumsum(t * 2, 1) + 1, torch.cumsum(t, 0), torch.cumprod(t[:, :6], 1),
                    torch.cumsum((t > 0).int(), 1)), x, strategy=strategy)
