"""The CUDA-graph capture rule (coil.scheduler.capture): one test per category.

The rule is pure logic over steps and layouts, so CUDA steps are built here with CUDA layouts on
a machine without a GPU. The expected answers come from the documented behaviour of each op
under capture (a sync, a host copy, a data-sized allocation), not from the rule's own tables.
"""

from __future__ import annotations

from typing import Any

import coil.lowering_ir as L
import pytest
import sympy
import torch
from coil.scheduler import schedule
from coil.scheduler.capture import capture_blocker, capture_blockers, graph_blocker, graph_device

CUDA = torch.device("cuda", 0)
CPU = torch.device("cpu")
aten = torch.ops.aten


def _buf(name: str, size: tuple[Any, ...], device: torch.device = CUDA, dtype: torch.dtype = torch.float32) -> L.ComputedBuffer:
    stride: list[Any] = []
    acc: Any = sympy.Integer(1)
    for s in reversed(size):
        stride.insert(0, acc)
        acc = acc * sympy.sympify(s)
    layout = L.Layout(device, dtype, tuple(sympy.sympify(s) for s in size), tuple(stride))
    return L.ComputedBuffer(name, layout)


def _extern(op: Any, args: tuple[Any, ...], results: Any, **kwargs: Any) -> L.ExternKernel:
    return L.ExternKernel("op0", ("n0",), op, args, kwargs, results, True)


def test_deliberate_externs_are_capturable() -> None:
    a, b, c = _buf("a", (4, 8)), _buf("b", (8, 5)), _buf("c", (4, 5))
    assert capture_blocker(_extern(aten.mm.default, (a, b), c), CUDA) is None
    assert capture_blocker(_extern(aten.addmm.default, (c, a, b), _buf("d", (4, 5))), CUDA) is None
    x, w = _buf("x", (1, 3, 8, 8)), _buf("w", (4, 3, 3, 3))
    conv = _extern(aten.convolution.default, (x, w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1),
                   _buf("y", (1, 4, 6, 6)))
    assert capture_blocker(conv, CUDA) is None
    # a fallback with a static shape on the graph's device is capturable too (cummax: a scan)
    assert capture_blocker(_extern(aten.cummax.default, (a, 1), (_buf("v", (4, 8)), _buf("i", (4, 8), dtype=torch.int64))),
                           CUDA) is None


def test_data_dependent_output_shapes_are_not_capturable() -> None:
    x = _buf("x", (4, 8))
    u0 = sympy.Symbol("u0", integer=True, nonnegative=True)
    why = capture_blocker(_extern(aten.nonzero.default, (x,), _buf("nz", (u0, 2), dtype=torch.int64)), CUDA)
    assert why is not None and "aten.nonzero.default" in why and "data-dependent output shape" in why
    mask = _buf("m", (4, 8), dtype=torch.bool)
    assert capture_blocker(_extern(aten.masked_select.default, (x, mask), _buf("s", (u0,))), CUDA) is not None
    # static traced shape, but the kernel still sizes from data unless told: conservative
    reps = _buf("r", (4,), dtype=torch.int64)
    assert capture_blocker(_extern(aten.repeat_interleave.Tensor, (reps,), _buf("o", (8,), dtype=torch.int64),
                                   output_size=8), CUDA) is not None


def test_integer_index_with_static_result_is_capturable() -> None:
    x, idx = _buf("x", (10, 3)), _buf("i", (5,), dtype=torch.int64)
    assert capture_blocker(_extern(aten.index.Tensor, (x, [idx]), _buf("o", (5, 3))), CUDA) is None
    u0 = sympy.Symbol("u0", integer=True, nonnegative=True)
    assert capture_blocker(_extern(aten.index.Tensor, (x, [idx]), _buf("o", (u0, 3))), CUDA) is not None


def test_host_syncs_are_not_capturable() -> None:
    s = _buf("s", ())
    why = capture_blocker(_extern(aten._local_scalar_dense.default, (s,), None), CUDA)
    assert why is not None and "sync" in why
    a, b = _buf("a", (3,)), _buf("b", (3,))
    assert capture_blocker(_extern(aten.equal.default, (a, b), None), CUDA) is not None
    # histc's CUDA kernel reads the data range on the host when min == max (the default: 0, 0)
    assert capture_blocker(_extern(aten.histc.default, (a, 10, 0, 0), _buf("h", (10,))), CUDA) is not None
    assert capture_blocker(_extern(aten.histc.default, (a, 10), _buf("h", (10,))), CUDA) is not None
    assert capture_blocker(_extern(aten.histc.default, (a,), _buf("h", (100,)), min=2.0, max=2.0), CUDA) is not None


def test_a_histogram_over_a_given_range_is_capturable() -> None:
    """A mixture-of-experts router counts tokens per expert with histc(ids, E, 0, E - 1): the
    kernel bins with the given bounds, no host read."""
    ids = _buf("ids", (64,), dtype=torch.int32)
    assert capture_blocker(_extern(aten.histc.default, (ids, 8, 0, 7), _buf("h", (8,), dtype=torch.int32)), CUDA) is None
    assert capture_blocker(_extern(aten.histc.default, (ids, 8), _buf("h", (8,), dtype=torch.int32), min=0, max=7),
                           CUDA) is None


def test_other_devices_are_not_capturable() -> None:
    x = _buf("x", (4, 8))
    to_cpu = _extern(aten._to_copy.default, (x,), _buf("y", (4, 8), device=CPU), device=CPU)
    why = capture_blocker(to_cpu, CUDA)
    assert why is not None and "cpu" in why
    scalar_on_cpu = _buf("s", (), device=CPU)
    assert capture_blocker(_extern(aten.mul.Tensor, (x, scalar_on_cpu), _buf("z", (4, 8))), CUDA) is not None
    # "cuda" and "cuda:0" are the same device
    assert capture_blocker(_extern(aten.mm.default, (x, _buf("w", (8, 2), device=torch.device("cuda"))),
                                   _buf("o", (4, 2))), CUDA) is None
    # relative to the graph's device: on a CPU graph CPU tensors are not foreign
    assert capture_blocker(_extern(aten.mm.default, (_buf("p", (2, 2), CPU), _buf("q", (2, 2), CPU)),
                                   _buf("r", (2, 2), CPU)), CPU) is None


def test_random_ops_capturable_on_the_default_generator_only() -> None:
    seed = _extern(aten.randint.low, (0, 2**31 - 1, [1]), _buf("seed", (1,), dtype=torch.int64),
                   dtype=torch.int64, device=CUDA)
    assert capture_blocker(seed, CUDA) is None
    x = _buf("x", (4,))
    gen = torch.Generator()
    why = capture_blocker(_extern(aten.bernoulli.default, (x,), _buf("b", (4,)), generator=gen), CUDA)
    assert why is not None and "Generator" in why
    assert capture_blocker(_extern(aten.bernoulli.default, (x,), _buf("b", (4,)), generator=None), CUDA) is None


def test_higher_order_ops_are_not_capturable() -> None:
    op = torch.ops.higher_order.with_effects
    why = capture_blocker(_extern(op, (), None), CUDA)
    assert why is not None and "higher-order" in why


def test_functional_collectives_are_not_capturable() -> None:
    c10d = torch.ops._c10d_functional
    a, r = _buf("a", (64,)), _buf("r", (64,))
    launch = capture_blocker(_extern(c10d.all_reduce.default, (a, "sum", "0"), r), CUDA)
    wait = capture_blocker(_extern(c10d.wait_tensor.default, (r,), _buf("w", (64,))), CUDA)
    assert launch is not None and "all_reduce" in launch and "functional collective" in launch
    assert wait is not None and "wait_tensor" in wait


def test_graph_level_rule() -> None:
    s0 = sympy.Symbol("s0", integer=True, positive=True)
    inp = L.InputBuffer("arg0", L.Layout(CUDA, torch.float32, (s0,), (sympy.Integer(1),)), 0)
    g = L.LoweredGraph("g", [inp], [], [], [inp], symbol_hints={s0: 4})
    why = graph_blocker(g)
    assert why is not None and "dynamic" in why
    static = L.InputBuffer("arg0", L.Layout(CUDA, torch.float32, (sympy.Integer(4),), (sympy.Integer(1),)), 0)
    assert graph_blocker(L.LoweredGraph("g", [static], [], [], [static])) is None
    on_cpu = L.InputBuffer("arg0", L.Layout(CPU, torch.float32, (sympy.Integer(4),), (sympy.Integer(1),)), 0)
    g_cpu = L.LoweredGraph("g", [on_cpu], [], [], [on_cpu])
    assert graph_device(g_cpu) == CPU
    assert "no CUDA" in (graph_blocker(g_cpu) or "")


@pytest.mark.parametrize("blocked", [False, True])
def test_capture_blockers_over_a_lowered_schedule(sch: Any, blocked: bool) -> None:
    def f(x: torch.Tensor, r: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = torch.relu(x) + 1
        if blocked:
            z = torch.repeat_interleave(y, r, dim=0, output_size=6)
        else:
            z = torch.cummax(y, 0)[0]
        return ((z * 2).sum(0),)

    s = schedule(sch.lower(f, torch.randn(3, 4), torch.tensor([1, 2, 3])))
    found = capture_blockers(s)
    steps = {i: st for i, st in enumerate(s.steps)}
    if blocked:
        assert len(found) == 1
        (i,) = found
        assert isinstance(steps[i], L.ExternKernel) and steps[i].kernel == aten.repeat_interleave.Tensor
    else:
        assert found == {}
