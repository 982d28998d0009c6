"""The pattern matcher with user rules: data in a registry, shape/dtype checks, meta derived."""

from __future__ import annotations

import torch
from coil.fx_passes import (
    PassManager,
    PatternRegistry,
    Rule,
    Stage,
    check_graph,
    match_rule,
    pattern_pass,
)

aten = torch.ops.aten


def _pat(x: torch.Tensor, s: float) -> torch.Tensor:
    return torch.sigmoid(x * s) * x  # swish with a scalar wildcard


def _rep(x: torch.Tensor, s: float) -> torch.Tensor:
    return torch.nn.functional.silu(x * s) / s


def _only_float32_2d(m) -> bool:  # type: ignore[no-untyped-def]
    v = m.value(0)
    return v.dtype == torch.float32 and v.dim() == 2


RULE = Rule("scaled_swish", _pat, _rep, lambda: (torch.randn(4, 4), 2.0), _only_float32_2d)


def test_registry_lists_counts_and_composes() -> None:
    reg = PatternRegistry([RULE])
    other = PatternRegistry([Rule("other", _pat, _rep, lambda: (torch.randn(4, 4), 2.0))])
    both = reg + other
    assert len(both) == 2 and both.names() == ("scaled_swish", "other") and "other" in both


def test_rule_matches_with_scalar_wildcard_and_derives_meta(trace) -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return (torch.sigmoid(x * 1.5) * x).sum(0)

    x = torch.randn(3, 5)
    gm = trace(f, x)
    anchor = next(
        n
        for n in gm.graph.nodes
        if n.target is aten.mul.Tensor
        and n.args[1] is not None
        and isinstance(n.args[1], torch.fx.Node)
    )
    found = match_rule(RULE, anchor)
    assert found is not None and found[0].args[1] == 1.5
    p = pattern_pass("swish", PatternRegistry([RULE]))
    assert PassManager([p], stage=Stage.POST_GRAD).run(gm).modified
    assert aten.silu.default in [n.target for n in gm.graph.nodes]
    check_graph(gm, pass_name="swish")  # every meta['val'] consistent
    torch.testing.assert_close(gm(x), f(x))


def test_check_constrains_shape_and_dtype(trace) -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(x * 1.5) * x

    p = pattern_pass("swish", PatternRegistry([RULE]))
    for bad in (torch.randn(3, 4, 5), torch.randn(3, 5, dtype=torch.float64)):
        gm = trace(f, bad)
        assert not PassManager([p], stage=Stage.POST_GRAD).run(gm).modified


def test_intermediate_used_elsewhere_blocks_match(trace) -> None:
    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        s = torch.sigmoid(x * 1.5)
        return s * x, s  # s escapes the pattern

    gm = trace(f, torch.randn(3, 5))
    p = pattern_pass("swish", PatternRegistry([RULE]))
    assert not PassManager([p], stage=Stage.POST_GRAD).run(gm).modified
