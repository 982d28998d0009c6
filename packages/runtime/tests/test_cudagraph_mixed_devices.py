"""cudagraphify's rule for inputs on several devices: the graph runs uncaptured, every call."""

from __future__ import annotations

from typing import Any

import torch
from coil.runtime import cudagraphify


def test_inputs_on_two_devices_run_uncaptured() -> None:
    seen: list[list[str]] = []

    def call(args: list[Any]) -> tuple[Any, ...]:
        seen.append([str(a.device) for a in args])
        out = (args[0] * 2,)
        args.clear()
        return out

    run = cudagraphify(call)
    scale = torch.tensor(3.0)  # a CPU scalar beside a tensor of another device
    for _ in range(3):
        (out,) = run([scale, torch.empty(4, device="meta")])
        torch.testing.assert_close(out, torch.tensor(6.0))  # no runner: the call itself ran
    assert seen == [["cpu", "meta"]] * 3
