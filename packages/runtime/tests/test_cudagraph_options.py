"""The CUDA-graph runner's configuration (`CaptureSpec`, `ReplayPolicy`) and the worth-it rule:
validated and normalised on construction, no device needed."""

from __future__ import annotations

import pytest
import torch
from coil.runtime import CaptureSpec, ReplayPolicy
from coil.runtime.cudagraph_options import (
    COPY_BYTES_PER_S,
    FRESH,
    LAUNCH_S,
    copies_outweigh_launches,
)


def test_iterables_become_tuples() -> None:
    spec = CaptureSpec(static_input_indices=[2, 0], also_static={3}, mutated_input_indices=iter([1]))
    assert spec.static_input_indices == (2, 0) and spec.also_static == (3,) and spec.mutated_input_indices == (1,)
    assert CaptureSpec().static_input_indices is None
    assert ReplayPolicy(static_outputs=[1, 0]).static_outputs == (1, 0)


def test_bad_combinations_raise() -> None:
    with pytest.raises(ValueError, match="static_outputs must be output indices or 'fresh'"):
        ReplayPolicy(static_outputs="all")
    with pytest.raises(ValueError, match="input_buffers cannot be combined with hold_outputs=False"):
        ReplayPolicy(hold_outputs=False, input_buffers={0: torch.zeros(1)})
    with pytest.raises(ValueError, match="launches"):
        CaptureSpec(launches=-1)


def test_outputs_not_held_are_all_handed_out() -> None:
    assert ReplayPolicy(static_outputs=(0,), hold_outputs=False).handed_out == FRESH
    assert ReplayPolicy(static_outputs=(0,)).handed_out == (0,)


def test_worth_it_rule() -> None:
    # the copies of one launch's saving: not worth a graph; a byte less is
    even = int(COPY_BYTES_PER_S * LAUNCH_S)
    assert copies_outweigh_launches(even, 1)
    assert not copies_outweigh_launches(even - 1, 1)
    assert not copies_outweigh_launches(200 * 10**6, 250)  # GPT-2-like: 250 launches, 200 MB of logits
    assert copies_outweigh_launches(2 * 16384 * 8192 * 2, 4)  # a big layer norm in and out
