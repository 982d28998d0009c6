"""Peak-bounded fusion (coil.scheduler.peak_bound): a fusion that would raise the peak of live
bytes is refused and logged; the profile's arithmetic checked against a brute-force recount."""

from __future__ import annotations

import coil.lowering_ir as L
import pytest
import torch
from coil.scheduler import KernelGroup, fuse, output_buffers
from coil.scheduler.fusion import FusionLog
from coil.scheduler.peak_bound import LiveProfile


def _three_phases(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    y1 = x.sin()            # returned: live from here to the end
    m = x.cos()             # read by two reductions over different dims: materialised
                            # (with lowering-ir's inlining off, `_no_inlining`: it would
                            # recompute it in both reductions, as many bytes as reading m)
    s0, s1 = m.sum(0), m.sum(1)
    y2 = x.exp()            # returned; fusing it with y1 (both read x) would start it early
    return y1, s0, s1, y2


@pytest.fixture(autouse=True)
def _no_inlining(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COIL_INLINE", "0")


def _group_of(steps: list[object], origin: str) -> int:
    return next(i for i, s in enumerate(steps) if isinstance(s, KernelGroup) and origin in s.origins())


def _bytes(op: L.Operation, name: str) -> int:
    return next(int(b.nbytes_expr) for b in op.outputs if b.name == name)


def _recount(graph: L.LoweredGraph, groups: list[list[L.Operation]], late: tuple[int, ...] = ()) -> int:
    """Peak of the planner model, brute force: every op runs at its group's first position (its
    last for the groups whose index is in `late`)."""
    pos = {id(op): i for i, op in enumerate(graph.operations)}
    run = {id(op): (max if k in late else min)(pos[id(o)] for o in g) for k, g in enumerate(groups) for op in g}
    grp = {id(op): k for k, g in enumerate(groups) for op in g}
    outs = output_buffers(graph.outputs)
    n = len(graph.operations)
    live = [0] * n
    for w in graph.operations:
        for b in w.outputs:
            rs = [r for r in graph.operations if b.name in r.reads()]
            if b.name not in outs and rs and all(grp[id(r)] == grp[id(w)] for r in rs):
                continue
            end = n - 1 if b.name in outs else max([run[id(r)] for r in rs], default=run[id(w)])
            for t in range(run[id(w)], max(end, run[id(w)]) + 1):
                live[t] += _bytes(w, b.name)
    return max(live)


def test_fusion_that_raises_the_peak_is_refused(sch) -> None:
    # 4 MiB buffers: the rise (one of them) is above peak_bound.TOLERATED_BYTES
    graph = sch.lower(_three_phases, torch.randn(1024, 1024))
    outs = output_buffers(graph.outputs)
    free = fuse(graph.operations, outs, peak_slack=None)
    assert _group_of(free, "sin") == _group_of(free, "exp")  # unbounded: one kernel for x's readers
    log = FusionLog()
    bounded = fuse(graph.operations, outs, log=log)
    assert _group_of(bounded, "sin") != _group_of(bounded, "exp")
    assert any(not taken and "would raise the peak" in why for _, _, taken, why in log.attempts)


def test_small_rises_are_tolerated(sch) -> None:
    """The same graph at 16 KiB per buffer: the rise is under TOLERATED_BYTES, so it fuses."""
    graph = sch.lower(_three_phases, torch.randn(64, 64))
    steps = fuse(graph.operations, output_buffers(graph.outputs))
    assert _group_of(steps, "sin") == _group_of(steps, "exp")


def test_profile_matches_a_brute_force_recount(sch) -> None:
    graph = sch.lower(_three_phases, torch.randn(64, 64))
    ops = list(graph.operations)
    prof = LiveProfile(ops, output_buffers(graph.outputs), _bytes)
    groups = [[op] for op in ops]
    assert prof.peak == _recount(graph, groups)
    # merge pairs of ops in turn (any pair: the model does not check legality) and compare
    for i, j in [(0, 1), (0, len(ops) - 1), (2, 3)]:
        a = next(g for g in groups if ops[i] in g)
        b = next(g for g in groups if ops[j] in g)
        if a is b:
            continue
        want = _recount(graph, [g for g in groups if g is not a and g is not b] + [a + b])
        assert prof.peak_if_merged(a, b) == want
        prof.merge(a, b)
        groups = [g for g in groups if g is not a and g is not b] + [a + b]
        assert prof.peak == want


def test_a_late_merge_matches_a_brute_force_recount(sch) -> None:
    """Merged at its last member's position (a combo of groups whose outputs nothing reads),
    the group's inputs live until then."""
    graph = sch.lower(_three_phases, torch.randn(64, 64))
    ops = list(graph.operations)
    for i, j in [(0, len(ops) - 1), (1, len(ops) - 1), (0, 2)]:
        prof = LiveProfile(ops, output_buffers(graph.outputs), _bytes)
        rest = [[op] for k, op in enumerate(ops) if k not in (i, j)]
        want = _recount(graph, [*rest, [ops[i], ops[j]]], late=(len(rest),))
        assert prof.peak_if_merged([ops[i]], [ops[j]], late=True) == want
        prof.merge([ops[i]], [ops[j]], late=True)
        assert prof.peak == want


def _chain(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    a = x.sin()
    b = a * 2               # returned
    c = b.exp()
    d = (a + c).sum(0)      # a lives until here
    e = c.cos() + x.t()
    return d, e, b


@pytest.mark.parametrize("fn", [_three_phases, _chain])
@pytest.mark.parametrize("seed", range(4))
def test_merges_in_any_order_match_a_brute_force_recount(sch, fn, seed: int) -> None:
    """Groups merged pair by pair in a random order until one is left (groups of several ops
    moving onto each other, either one first): the profile's peak, before and after each merge,
    is the brute-force recount's."""
    import random

    graph = sch.lower(fn, torch.randn(16, 16))
    ops = list(graph.operations)
    prof = LiveProfile(ops, output_buffers(graph.outputs), _bytes)
    groups = [[op] for op in ops]
    rng = random.Random(seed)
    while len(groups) > 1:
        a, b = rng.sample(groups, 2)
        rest = [g for g in groups if g is not a and g is not b]
        want = _recount(graph, [*rest, a + b])
        assert prof.peak_if_merged(a, b) == want
        prof.merge(a, b)
        groups = [*rest, a + b]
        assert prof.peak == want
