"""Handouts on the CPU: outputs a caller keeps into the next call (a gradient kept as `.grad`
while gradients accumulate) are copied out of the graph's memory before the replay that would
overwrite them; the oracle is the value each had when it was handed out. A "replay" overwrites the
graph's memory (`backing`, standing for the CUDA-graph pool) in place."""

from __future__ import annotations

import pytest
import torch
from coil.runtime import handouts
from coil.runtime.handouts import Handouts


class FakeGraph:
    """A graph whose two outputs, [3, 4] and [5], live in `backing` (the pool: memory the
    outputs' storages do not own, as a captured graph's outputs do not own theirs)."""

    def __init__(self) -> None:
        self.backing = torch.zeros(20)
        outs = {0: self._over(0, (3, 4)), 1: self._over(12, (5,))}
        self.handouts = Handouts(outs)
        first = {k: t.detach() for k, t in outs.items()}
        del outs
        self.first: dict[int, torch.Tensor] | None = first

    def _over(self, offset: int, shape: tuple[int, ...]) -> torch.Tensor:
        n = 1
        for s in shape:
            n *= s
        st = torch._C._construct_storage_from_data_pointer(self.backing.data_ptr() + 4 * offset, self.backing.device,
                                                           4 * n)
        return torch.empty(0).set_(st, 0, shape)

    def call(self, value: float) -> dict[int, torch.Tensor]:
        """The first call's outputs, then a replay per call: release, overwrite, hand out."""
        if self.first is not None:
            out, self.first = self.first, None
            self.backing.fill_(value)
            return out
        assert self.handouts.release() is None
        assert self.handouts.live() == []
        self.backing.fill_(value)
        return self.handouts.replayed()


def _count_use_counts(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """From now on, every storage use count the handouts read is appended to the returned list."""
    counted: list[int] = []
    real = handouts.use_count

    def counting(cdata: int) -> int:
        counted.append(cdata)
        return real(cdata)

    monkeypatch.setattr(handouts, "use_count", counting)
    monkeypatch.setattr(handouts, "use_counter", lambda: counting)
    return counted


def test_a_kept_gradient_moves_once_and_keeps_accumulating() -> None:
    g = FakeGraph()
    grad = g.call(1.0)[0]  # AccumulateGrad keeps the very tensor it was handed
    want = torch.ones(3, 4)
    for step in range(2, 5):
        out = g.call(float(step))
        assert torch.equal(grad, want)  # the replay did not overwrite it
        grad += out[0]  # accumulate, as AccumulateGrad does into an existing .grad
        want += step
        del out
    assert torch.equal(grad, want)
    assert g.handouts.evacuated == 1  # moved before the first replay only: it stays where it went
    assert grad.data_ptr() != g.backing.data_ptr()


def test_dropped_outputs_are_not_copied() -> None:
    g = FakeGraph()
    for step in range(1, 4):
        out = g.call(float(step))
        assert torch.equal(out[1], torch.full((5,), float(step)))
        del out
    assert g.handouts.evacuated == 0
    assert g.handouts.live() == []


def test_a_view_the_caller_made_moves_with_its_output() -> None:
    """A holder the runner never saw (a view the caller made, or `.grad` as AccumulateGrad
    detaches it) shares the output's storage, and so moves with it."""
    for replays in (0, 1):  # the first call's outputs, then a replay's
        g = FakeGraph()
        for step in range(replays):
            del g.call(float(step))[0]
        out = g.call(7.0)
        view = out[0][:, 1].detach()
        del out
        g.call(8.0)  # releases (moves the view), then overwrites the graph's memory
        assert torch.equal(view, torch.full((3,), 7.0))
        assert g.handouts.evacuated == 1


def test_outputs_sharing_a_storage_move_together() -> None:
    g = FakeGraph()
    g.call(1.0)
    out = g.call(2.0)  # a replay: the tensors are over storages the runner built from the slots
    a, b = out[0], out[1]
    del out
    assert g.handouts.release() is None
    assert g.handouts.evacuated == 2 and g.handouts.live() == []
    g.backing.fill_(3.0)
    assert torch.equal(a, torch.full((3, 4), 2.0)) and torch.equal(b, torch.full((5,), 2.0))


def test_without_storage_swaps_an_output_kept_although_held_is_cloned(monkeypatch: pytest.MonkeyPatch) -> None:
    """A torch without `UntypedStorage._swap_data_ptr_` (2.11) cannot move the holders of a
    replay's output: `release` says why (the runner runs that call uncaptured) and the output is
    held from then on; kept again although it was handed out held, it is handed out as a clone,
    which no replay overwrites."""
    monkeypatch.setattr(handouts, "can_swap", lambda storage: False)
    g = FakeGraph()
    del g.call(0.0)[0]
    kept = g.call(1.0)[0]  # a replay's output, kept by the caller
    why = g.handouts.release()
    assert why is not None and "held from now on: [0]" in why and g.handouts.held == {0} and not g.handouts.cloned
    del kept
    kept = g.call(2.0)[0]  # handed out held, and kept all the same
    assert g.handouts.release() is not None and g.handouts.cloned == {0}
    del kept
    kept = g.call(3.0)[0]  # a clone from now on
    assert kept.data_ptr() != g.backing.data_ptr()
    g.call(4.0)
    assert torch.equal(kept, torch.full((3, 4), 3.0))
    assert g.handouts.evacuated == 0


class AutogradGraph(FakeGraph):
    """A FakeGraph whose outputs are a backward's gradients, returned through autograd, and which
    runs a call "uncaptured" (fresh tensors, the graph's memory untouched) when `release` says
    that kept outputs cannot be moved, as the CUDA-graph runner does."""

    def __init__(self) -> None:
        super().__init__()
        self.uncaptured = 0

    def call(self, value: float) -> dict[int, torch.Tensor]:
        if self.first is None and self.handouts.release() is not None:
            self.uncaptured += 1
            return {0: torch.full((3, 4), value), 1: torch.full((5,), value)}
        if self.first is not None:
            return super().call(value)
        self.backing.fill_(value)
        return self.handouts.replayed()


def test_without_storage_swaps_accumulated_gradients_are_held_and_copied_by_autograd(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Gradient accumulation on a torch without storage swaps (2.11): the first step whose
    `.grad` is a replay's output runs its later micro-steps uncaptured; from then on the runner
    holds what it hands out until its next call, so AccumulateGrad copies the first micro-step's
    gradient into `.grad` (the oracle: its sum) instead of keeping the graph's memory, and every
    later call replays."""
    monkeypatch.setattr(handouts, "can_swap", lambda storage: False)
    g = AutogradGraph()
    del g.call(0.0)[0]  # the first call, dropped: the handouts are over the slots from here on
    p = torch.zeros(3, 4, requires_grad=True)
    value = 0.0

    class Backward(torch.autograd.Function):
        @staticmethod
        def forward(ctx: object, x: torch.Tensor) -> torch.Tensor:
            return x * 1

        @staticmethod
        def backward(ctx: object, grad: torch.Tensor) -> torch.Tensor:
            return g.call(value)[0]

    inside = range(g.backing.data_ptr(), g.backing.data_ptr() + 4 * g.backing.numel())
    for step in range(4):
        p.grad = None
        for micro in range(4):
            value = float(10 * step + micro)
            Backward.apply(p).sum().backward()
        want = sum(float(10 * step + m) for m in range(4))
        assert p.grad is not None and torch.equal(p.grad, torch.full((3, 4), want)), (step, p.grad)
        if step >= 2:
            assert p.grad.data_ptr() not in inside  # a copy, not the graph's memory
    assert g.uncaptured == 3  # step 1's last three micro-steps, while its .grad was the graph's
    assert g.handouts.held == {0} and not g.handouts.cloned


def test_dead_outputs_stay_dead_until_the_next_hand_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """`live` counts storage uses only until it finds every output dead: nothing can reference
    them again before `replayed` hands out new tensors, so a pool's other members' checks cost
    nothing then. A new hand-out is counted again; `in_use` agrees with `live` throughout."""
    g = FakeGraph()
    kept = g.call(1.0)
    del kept
    out = g.call(2.0)  # a replay: tensors over the slots
    assert g.handouts.live() and g.handouts.in_use()
    del out
    counted = _count_use_counts(monkeypatch)
    assert g.handouts.live() == [] and not g.handouts.in_use()
    n = len(counted)
    assert n > 0
    for _ in range(3):
        assert g.handouts.live() == [] and not g.handouts.in_use()
    assert len(counted) == n, "dead outputs were counted again"
    out = g.call(3.0)
    assert g.handouts.live() and g.handouts.in_use() and len(counted) > n
    assert torch.equal(out[1], torch.full((5,), 3.0))


def test_live_among_is_live_restricted_to_the_outputs_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pool member's replay asks an earlier member about the outputs it did not keep clear of
    alone: the answer is `live()`'s restricted to them (the oracle), before and after replays,
    and only the outputs asked are counted."""
    g = FakeGraph()
    patterns = ({0}, {1}, {0, 1}, set())
    for step in range(1, 9):  # the first call's hand-out, then replays; each keeping some outputs
        out = g.call(float(step))
        kept = {k: out[k] for k in patterns[step % 4]}
        del out
        for asked in ((0,), (1,), (0, 1), ()):
            assert g.handouts.live_among(asked) == [k for k in g.handouts.live() if k in asked]
        assert g.handouts.live() == sorted(kept)
        del kept
    out = g.call(9.0)  # a replay's hand-out, both outputs referenced
    counted = _count_use_counts(monkeypatch)
    assert g.handouts.live_among((1,)) == [1]
    assert len(counted) == 1, "an output not asked about was counted"
    del out[1]
    assert g.handouts.live_among((0, 1)) == [0] and len(counted) == 3
    assert g.handouts.live_among((0, 1)) == [0] and len(counted) == 4, "a dead output was counted again"
    del out
    out = g.call(10.0)  # a new hand-out: both counted again
    n = len(counted)
    assert g.handouts.live_among((0, 1)) == [0, 1] and len(counted) == n + 2
    del out


def test_a_pool_closes_to_captures_while_a_replayed_members_outputs_are_in_use() -> None:
    """A capture may reuse pool memory the caching allocator counts as free. A replay's outputs
    lie in such memory (the first call's tensors were freed), so while one is referenced no
    graph that hands its outputs out may capture into that pool; first-call outputs are the
    allocator's own and do not close it."""
    from coil.runtime import graph_pools

    g = FakeGraph()
    pool = ("test pool", id(g))
    graph_pools.join_pool(g, pool)  # type: ignore[arg-type]
    try:
        kept = g.call(1.0)  # the first call's tensors
        assert graph_pools.open_to_captures(pool)
        del kept
        out = g.call(2.0)  # a replay's tensors over the slots, still referenced
        assert not graph_pools.open_to_captures(pool)
        del out
        assert graph_pools.open_to_captures(pool)
    finally:
        graph_pools.POOL_MEMBERS.pop(pool, None)


class Member:
    """A stand-in for the runner whose pool guard is tested: the guard reads nothing of it."""


def test_a_pool_guard_sees_every_kept_output_and_counts_a_dead_one_once_per_hand_out(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`PoolGuard.conflict` against the brute-force oracle: a conflict exactly when an output of
    an earlier member that was unreferenced at the capture (`exposed`) is referenced now. An
    earlier member whose exposed outputs were all found dead is not counted again before it
    hands out anew, and an output kept from that new hand-out is still seen."""
    from coil.runtime import graph_pools

    earlier = [FakeGraph(), FakeGraph()]
    me = Member()
    pool = ("guard test pool", id(me))
    for g in earlier:
        g.first = None  # the first call's tensors dropped: every output is unreferenced
    outs = [g.call(1.0) for g in earlier]  # replays' hand-outs, kept as the capture happens
    kept_at_capture = {(0, 1): outs[0][1]}  # member 0's output 1 referenced then: protected
    del outs
    try:
        for g in (*earlier, me):
            graph_pools.join_pool(g, pool)  # type: ignore[arg-type]
        guard = graph_pools.PoolGuard(me, pool, {})  # type: ignore[arg-type]
        exposed = {(0, 0), (1, 0), (1, 1)}
        counted = _count_use_counts(monkeypatch)
        for step in range(2, 8):
            handed = [g.call(float(step)) for g in earlier]
            keep = {(m, k): handed[m][k] for m, k in ((0, 0), (0, 1), (1, 1)) if (step + m + k) % 3 == 0}
            del handed
            oracle = any(key in exposed for key in keep)
            assert (guard.conflict([]) is not None) == oracle, (step, sorted(keep))
            keep.clear()
            assert guard.conflict([]) is None, step
            n = len(counted)
            assert guard.conflict([]) is None and len(counted) == n, "dead outputs were counted again"
    finally:
        graph_pools.POOL_MEMBERS.pop(pool, None)
        del kept_at_capture
