"""Compile one fuzzed program with coil and compare it against eager."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from coil.knobs import knobs

from .programs import Program, uses_float16


@contextmanager
def split_knob(value: int | None) -> Iterator[None]:
    """The knob split_reduction_min set to `value` inside (untouched when None), restored after."""
    if value is None:
        yield
        return
    with knobs.override(split_reduction_min=value):
        yield


def tolerances(dtype: torch.dtype, low: bool = False) -> dict[str, float]:
    """float16 outputs, and float outputs of programs where float16 took part upstream (coil keeps
    fp32 in registers across a fused chain, eager rounds every op to float16): 1e-2."""
    if dtype == torch.float16 or (low and dtype.is_floating_point):
        return {"atol": 1e-2, "rtol": 1e-2}
    return {}  # assert_close's per-dtype defaults


def check(prog: Program) -> None:
    """Raise (AssertionError for a mismatch, anything else for a crash) unless coil matches eager."""
    import coil.backend
    torch._dynamo.reset()
    coil.backend.reset()
    fn = prog.function()
    expected = fn(*prog.make_inputs())
    with knobs.override(fallback_on_error=False), split_knob(prog.split_min):
        actual = torch.compile(fn, backend="coil", fullgraph=True, dynamic=prog.dynamic or None)(*prog.make_inputs())
    assert len(actual) == len(expected)
    for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
        torch.testing.assert_close(
            a, e, equal_nan=True, **tolerances(e.dtype, uses_float16(prog)), msg=lambda m, i=i: f"output {i}: {m}"
        )
