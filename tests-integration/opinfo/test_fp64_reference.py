"""The float64-reference rule (fp64_reference.py) on hand-made outputs, with torch as the oracle."""

from __future__ import annotations

import torch

from opinfo.fp64_reference import closer_to_fp64, leaf_violations, upcast


def _sum_in_half(x: torch.Tensor) -> torch.Tensor:
    """A reduction eager rounds to the input's dtype: the fp64 run gives the exact sum."""
    return x.sum(0)


def _args(x: torch.Tensor) -> tuple[torch.Tensor, tuple[()], dict[str, object]]:
    return (x, (), {})


def _call(x: torch.Tensor, args: tuple[()], kwargs: dict[str, object]) -> torch.Tensor:
    return _sum_in_half(x)


def test_upcast_only_touches_floating_tensors() -> None:
    tree = (torch.ones(2, dtype=torch.float16), [torch.arange(3), 2.5], {"w": torch.ones(1, dtype=torch.bfloat16)})
    out = upcast(tree)
    assert out[0].dtype == torch.float64 and out[2]["w"].dtype == torch.float64
    assert out[1][0].dtype == torch.int64 and out[1][1] == 2.5


def test_closer_output_passes_and_further_output_fails() -> None:
    gen = torch.Generator().manual_seed(0)
    x = (torch.rand(512, 4, generator=gen) * 8).to(torch.float16)
    exact = x.double().sum(0)
    eager = _sum_in_half(x)
    good = exact.to(torch.float16)  # correctly rounded: never further than eager
    assert closer_to_fp64(_call, _args(x), "float16", good, eager)
    bad = (exact * (1 + 0.02)).to(torch.float16)  # 2 % off: beyond eager's error + tolerance
    assert not closer_to_fp64(_call, _args(x), "float16", bad, eager)


def test_rule_applies_to_half_types_only() -> None:
    x = torch.rand(8, 3)
    assert closer_to_fp64(_call, _args(x), "float32", x.sum(0) + 1, x.sum(0)) == ""


def test_elementwise_bound_and_nan_handling() -> None:
    r = torch.tensor([1.0, 2.0, float("nan"), float("inf"), 100.0], dtype=torch.float64)
    e = torch.tensor([1.5, 2.0, 3.0, float("inf"), 100.0], dtype=torch.bfloat16)
    # 1.25 is nearer 1.0 than eager's 1.5; NaN where the reference is NaN; equal infinity;
    # 101.5 is 1.5 from 100 but within eager's error (0) + atol + rtol * 100 = 1.6
    a = torch.tensor([1.25, 2.0, float("nan"), float("inf"), 101.5], dtype=torch.bfloat16)
    assert leaf_violations(a, e, r)[0] == 0
    a2 = torch.tensor([1.75, 2.0, 3.0, float("inf"), 102.0], dtype=torch.bfloat16)  # 2 elements break
    assert leaf_violations(a2, e, r)[0] == 2
