"""CodegenOptions(debug_asserts=True): bounds asserts on data-dependent loads and scatter stores.

Triton compiles `tl.device_assert` out unless the kernel runs in debug mode; under the
interpreter that is `interpreter_builder.options.debug` (what coil.runtime sets for a
`KernelSpec(debug=True)`), switched on here around the launches.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from coil.lowering_ir import Scatter
from coil.scheduler import KernelGroup, scatter_groups
from coil.triton_codegen import CodegenOptions, KernelSource, generate

DEBUG = CodegenOptions(debug_asserts=True)


@contextlib.contextmanager
def interpreter_debug() -> Iterator[None]:
    from triton.runtime import interpreter

    builder: Any = interpreter.interpreter_builder
    old = builder.options
    builder.options = dataclasses.replace(old, debug=True, sanitize_overflow=False)
    try:
        yield
    finally:
        builder.options = old


@pytest.fixture
def checked(tk: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """tk whose kernels are generated with debug asserts and run in interpreter debug mode."""
    monkeypatch.setattr(sys.modules[tk.__module__], "generate", functools.partial(generate, options=DEBUG))
    return tk


def _embedding(w: torch.Tensor, i: torch.Tensor) -> tuple[torch.Tensor]:
    return (torch.nn.functional.embedding(i, w) * 2.0,)


def _index_select_mid(x: torch.Tensor, i: torch.Tensor) -> tuple[torch.Tensor]:
    return (torch.index_select(x, 1, i) + 1.0,)


def _index_put(x: torch.Tensor, i: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor]:
    return (torch.index_put(x, (i,), v, accumulate=True),)


def test_options_are_validated() -> None:
    assert CodegenOptions().debug_asserts is False
    with pytest.raises(TypeError):
        CodegenOptions(debug_asserts=1)  # type: ignore[arg-type]


def test_indirect_loads_get_asserts_only_when_asked(tk: Any) -> None:
    w, i = torch.randn(10, 4), torch.tensor([1, 9, 0])
    sched = tk.schedule(_embedding, w, i)
    (group,) = [st for st in sched.steps if isinstance(st, KernelGroup)]
    bufs = sched.graph.buffers()
    plain = generate(group, bufs, "interpret")
    debug = generate(group, bufs, "interpret", options=DEBUG)
    assert "device_assert" not in plain.source and not plain.debug
    assert debug.debug
    asserts = [ln.strip() for ln in debug.source.splitlines() if "tl.device_assert(" in ln]
    assert len(asserts) == 2  # the row index against dim 0 (size 10), the storage index against 40
    assert "outside [0, 10) of the dim it indexes" in asserts[0] and "outside [0, 40)" in asserts[1]


def test_affine_kernels_get_no_asserts(tk: Any) -> None:
    sources: list[KernelSource] = []
    sched = tk.schedule(lambda x: ((x.t() * 2.0).sum(0),), torch.randn(4, 6))
    for st in sched.steps:
        sources.append(generate(st, sched.graph.buffers(), "interpret", options=DEBUG))
    assert sources and all(not s.debug and "device_assert" not in s.source for s in sources)


def test_in_range_indices_run_unchanged(checked: Any) -> None:
    w, i = torch.randn(10, 4), torch.tensor([[1, 9], [0, 3]])
    with interpreter_debug():
        checked.check(_embedding, w, i)
        checked.check(_index_select_mid, torch.randn(2, 5, 3), torch.tensor([4, 0, 2]))


@pytest.mark.parametrize("bad", [10, 12, -11])
def test_out_of_range_embedding_index_raises(checked: Any, bad: int) -> None:
    w, i = torch.randn(10, 4), torch.tensor([1, bad, 0])
    with interpreter_debug(), pytest.raises(Exception, match=r"coil bounds: \w+ load of arg0: an index is outside \[0, 10\)"):
        checked.run(_embedding, w, i)


def test_middle_dim_index_is_checked_against_its_dim(checked: Any) -> None:
    # index 5 of dim 1 (size 5) still lands inside the storage for row 0: only the per-dim
    # assert catches it
    x, i = torch.randn(2, 5, 3), torch.tensor([5])
    with interpreter_debug(), pytest.raises(Exception, match=r"an index is outside \[0, 5\)"):
        checked.run(_index_select_mid, x, i)


def _run_scatter(tk: Any, x: torch.Tensor, i: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """index_put through its two kernels (init, scatter), generated with debug asserts."""
    sched = tk.schedule(_index_put, x, i, v)
    (op,) = [st for st in sched.steps if isinstance(st, Scatter)]
    bufs = sched.graph.buffers()
    kernels = [generate(g, bufs, "interpret", options=DEBUG) for g in scatter_groups(op)]
    assert [k.debug for k in kernels] == [False, True]  # the init kernel is a plain copy
    env = {"arg0": x, "arg1": i, "arg2": v, op.output.name: torch.empty_like(x)}
    for k in kernels:
        sys.modules[tk.__module__].launch(k, env)
    return env[op.output.name]


def test_scatter_target_index_is_checked(tk: Any) -> None:
    x, v = torch.zeros(6), torch.ones(2)
    with interpreter_debug():
        torch.testing.assert_close(_run_scatter(tk, x, torch.tensor([1, 5]), v), _index_put(x, torch.tensor([1, 5]), v)[0])
    with interpreter_debug(), pytest.raises(Exception, match=r"coil bounds: \w+ scatter of buf\d+"):
        _run_scatter(tk, x, torch.tensor([1, 6]), v)
