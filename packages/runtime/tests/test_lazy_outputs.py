"""LazyOutputs on the CPU: a "replay" is an in-place overwrite of the static outputs; what a caller
kept from an earlier call must still hold that call's values (the oracle: clones taken when it was
handed out), and nothing is copied for what the caller dropped."""

from __future__ import annotations

import gc

import pytest
import torch
from coil.runtime.lazy_outputs import LazyOutputs


class FakeGraph:
    """Static outputs the runner holds: a [3, 4] buffer, a view of it, and a second buffer."""

    def __init__(self) -> None:
        base = torch.zeros(3, 4)
        self.outputs = (base, base[:, 1:3], torch.zeros(5))
        self.lazy = LazyOutputs(dict(enumerate(self.outputs)))

    def replay(self, value: float) -> dict[int, torch.Tensor]:
        """free(), overwrite every static output with `value`, hand out (the runner's order)."""
        assert self.lazy.free() is None
        for o in self.outputs:
            o.fill_(value)
        return self.lazy.hand_out()


def test_dropped_outputs_are_not_copied_and_kept_ones_keep_their_values() -> None:
    g = FakeGraph()
    first = g.replay(1.0)
    assert first[0].data_ptr() == g.outputs[0].data_ptr()  # uncloned
    kept, kept_view = first[0], first[1]
    want, want_view = kept.clone(), kept_view.clone()
    del first
    second = g.replay(2.0)  # the first call's [3, 4] output and its view are moved; output 2 is not
    assert g.lazy.evacuated == 1
    assert torch.equal(kept, want) and torch.equal(kept_view, want_view)
    assert kept.data_ptr() != g.outputs[0].data_ptr()
    assert kept_view.untyped_storage().data_ptr() == kept.untyped_storage().data_ptr()  # still aliased
    assert torch.equal(second[0], torch.full((3, 4), 2.0)) and torch.equal(second[2], torch.full((5,), 2.0))
    del second, kept, kept_view
    third = g.replay(3.0)
    assert g.lazy.evacuated == 1  # nothing held: nothing copied
    assert torch.equal(third[1], torch.full((3, 2), 3.0))


def test_out_equals_model_of_x_in_a_loop_keeps_every_value() -> None:
    g = FakeGraph()
    kept = []
    out = g.replay(0.0)
    for step in range(1, 5):
        out = g.replay(float(step))  # the old `out` is alive during the call that replaces it
        kept.append(out[2])
    for step, t in enumerate(kept, start=1):
        assert torch.equal(t, torch.full((5,), float(step)))
    assert g.lazy.enabled


def test_a_view_made_by_the_caller_turns_handing_out_off() -> None:
    g = FakeGraph()
    out = g.replay(1.0)
    row = out[0][0]  # a tensor the runner does not know, over the graph's memory
    del out
    why = g.lazy.free()
    assert why is not None and "not the tensors the runner handed out" in why and not g.lazy.enabled
    assert torch.equal(row, torch.ones(4))  # nothing moved: the runner must not replay now
    assert g.lazy.free() is not None  # still referenced
    del row
    gc.collect()
    assert g.lazy.free() is None  # free again; the runner clones from now on


def test_the_caller_moving_a_handout_itself_is_not_counted() -> None:
    g = FakeGraph()
    out = g.replay(1.0)
    out[2].set_(torch.full((5,), 9.0))
    kept = out[2]
    del out
    assert g.lazy.free() is None and g.lazy.evacuated == 0
    assert torch.equal(kept, torch.full((5,), 9.0))


@pytest.mark.parametrize("mode", ["inference", "no_grad", "grad"])
def test_handed_out_under_one_grad_mode_and_moved_under_another(mode: str) -> None:
    g = FakeGraph()
    ctx = torch.inference_mode() if mode == "inference" else torch.no_grad() if mode == "no_grad" else torch.enable_grad()
    with ctx:
        out = g.replay(4.0)
    assert out[0].is_inference() == (mode == "inference")
    with torch.enable_grad():  # the next call comes outside inference mode
        assert g.lazy.free() is None and g.lazy.evacuated == 2
    for o in g.outputs:
        o.fill_(-1.0)
    assert torch.equal(out[0], torch.full((3, 4), 4.0)) and torch.equal(out[2], torch.full((5,), 4.0))


def test_a_handout_grown_by_its_holder_is_seen_as_resized() -> None:
    g = FakeGraph()
    out = g.replay(1.0)
    assert not g.lazy.resized()
    with pytest.warns(UserWarning, match="resized"):
        torch.add(torch.ones(7), 1.0, out=out[2])  # `out=` of another shape grows the shared storage
    assert g.lazy.resized(), "the runner's static output no longer holds the graph's memory"
    assert g.outputs[2].untyped_storage().data_ptr() == out[2].untyped_storage().data_ptr()


def test_adopt_hands_the_first_result_out_over_the_static_outputs() -> None:
    """The warm-up result (other memory) is copied into the static outputs and handed out over
    them, views kept; the next free() moves it like any call's outputs when kept."""
    g = FakeGraph()
    base = torch.arange(12.0).reshape(3, 4)
    warm = (base, base[:, 1:3], torch.arange(5.0))
    first = g.lazy.adopt(warm)
    assert first[0].data_ptr() == g.outputs[0].data_ptr() and first[1].data_ptr() == g.outputs[1].data_ptr()
    for got, want in zip(first, warm, strict=True):
        assert torch.equal(got, want)
    assert g.lazy.held()
    second = g.replay(7.0)
    assert g.lazy.evacuated == 2, "the kept first result was moved off the graph's memory"
    assert torch.equal(first[0], warm[0]) and torch.equal(first[2], warm[2])
    assert torch.equal(second[2], torch.full((5,), 7.0))
    del first, second
    assert not g.lazy.held()


def test_adopt_leaves_an_output_with_overlapping_elements_as_it_is() -> None:
    """A static output whose elements overlap beyond broadcasting (sliding windows) cannot take
    the warm-up's values: the first result is returned unchanged, nothing recorded as handed out."""
    windows = torch.zeros(6).as_strided((3, 4), (1, 1))
    lazy = LazyOutputs({0: windows})
    warm = (torch.arange(6.0).as_strided((3, 4), (1, 1)),)
    assert lazy.adopt(warm) is warm
    assert not lazy.held()


def test_free_collects_once_before_moving_outputs_a_cycle_holds() -> None:
    """`free(collect)` runs the collection only when a storage is still referenced, and outputs
    that only a reference cycle held are then not copied away; a real holder still is."""
    g = FakeGraph()
    calls: list[int] = []

    def collect() -> None:
        calls.append(gc.collect())

    g.replay(1.0)  # its outputs dropped at once
    assert g.lazy.free(collect) is None and calls == [], "nothing held: no collection"
    out = g.replay(1.5)
    cycle: list[object] = [out]
    cycle.append(cycle)
    del out, cycle
    gc.disable()  # only `collect` may free the cycle
    try:
        assert g.lazy.free(collect) is None
    finally:
        gc.enable()
    assert len(calls) == 1 and g.lazy.evacuated == 0
    kept = g.replay(2.0)[2]
    assert g.lazy.free(collect) is None and len(calls) == 2
    assert g.lazy.evacuated == 1, "a real holder is moved after the collection"
    assert torch.equal(kept, torch.full((5,), 2.0))
