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


def test_without_storage_swaps_a_kept_output_is_cloned_from_then_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """A torch without `UntypedStorage._swap_data_ptr_` (2.11) cannot move the holders of a
    storage it did not allocate: `release` says why (the runner runs that call uncaptured) and
    the output is handed out as a clone from then on, so a kept one is never overwritten."""
    monkeypatch.setattr(handouts, "can_swap", lambda storage: False)
    g = FakeGraph()
    grad = g.call(1.0)[0]
    why = g.handouts.release()
    assert why is not None and "clones from now on: [0]" in why and g.handouts.cloned == {0}
    del grad  # the uncaptured call's outputs were fresh; the next replay hands out a clone
    grad = g.call(2.0)[0]
    assert grad.data_ptr() != g.backing.data_ptr() and torch.equal(grad, torch.full((3, 4), 2.0))
    for step in range(3, 5):
        out = g.call(float(step))
        grad += out[0]
        del out
    assert torch.equal(grad, torch.full((3, 4), 9.0))
    assert g.handouts.evacuated == 0
