"""Graphs that mix a CPU scalar with CUDA tensors (coil.lowering_ir.devices), lowered from fake
CUDA tensors (no GPU needed): no kernel reads a buffer of another device; a CPU constant's known
value is a literal of the kernel, any other CPU value a copy made by an ATen step; nodes on the
CPU are ATen calls and their outputs stay on the CPU. The lowered IR is then evaluated with the
brute-force evaluator (conftest.py) on CPU tensors standing in for the CUDA ones, against eager."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import coil.lowering_ir as L
import pytest
import torch
from coil.lowering_ir.devices import graph_device, same_device
from torch._subclasses.fake_tensor import FakeTensorMode

CUDA = torch.device("cuda", 0)
CPU = torch.device("cpu")


def _lower(ir: Any, fn: Callable[..., Any], *inputs: torch.Tensor) -> L.LoweredGraph:
    """`fn` traced with fake copies of `inputs` (0-d ones on the CPU, the others on CUDA), lowered."""
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    with mode:
        fakes = [torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=CPU if t.dim() == 0 else CUDA)
                 for t in inputs]
    gm = ir.trace(fn, *fakes)
    assert graph_device(gm) == CUDA
    return L.lower(gm)


def _kernels(g: L.LoweredGraph) -> list[L.Operation]:
    return [op for op in g.operations if isinstance(op, L.Pointwise | L.Reduction | L.Scatter)]


def _check_placement(g: L.LoweredGraph) -> None:
    """Every kernel runs on CUDA and reads CUDA buffers only."""
    bufs = g.buffers() | {v.name: v for v in g.views}
    for op in g.operations:
        if isinstance(op, L.ExternKernel):
            bufs.update({b.name: b for b in op.outputs})
    for op in _kernels(g):
        assert same_device(op.output.layout.device, CUDA), op
        for r in op.reads():
            assert same_device(bufs[r].layout.device, CUDA), f"{op.name} reads {r} on {bufs[r].layout.device}"


def _copies(g: L.LoweredGraph) -> list[L.ExternKernel]:
    return [op for op in g.operations if isinstance(op, L.ExternKernel) and op.kernel is torch.ops.aten._to_copy.default
            and op.kwargs.get("device") == CUDA]


def _literals(g: L.LoweredGraph) -> set[object]:
    out: set[object] = set()

    def walk(v: L.Value) -> None:
        if isinstance(v, L.Constant):
            out.add(v.value)
        elif isinstance(v, L.Op):
            for a in v.args:
                walk(a)
        elif isinstance(v, L.Load) and v.mask is not None:
            walk(v.mask)

    for op in _kernels(g):
        walk(op.value if isinstance(op, L.Scatter) else op.body)
    return out


def _evaluate_on_cpu(ir: Any, g: L.LoweredGraph, inputs: list[torch.Tensor]) -> list[Any]:
    """The IR's values with the CPU standing in for CUDA (explicit copies then copy on the CPU)."""
    for op in g.operations:
        if isinstance(op, L.ExternKernel) and isinstance(op.kwargs.get("device"), torch.device):
            op.kwargs = {**op.kwargs, "device": CPU}
    return ir.evaluate(g, inputs)  # type: ignore[no-any-return]


def _same(ir: Any, got: list[Any], want: Any) -> None:
    want = list(want) if isinstance(want, tuple | list) else [want]
    ir.assert_same(got, [w.cpu() if isinstance(w, torch.Tensor) else w for w in want])


def _folded_away(ir: Any, f: Callable[..., Any], x: torch.Tensor, literal: object) -> None:
    """`f(x)` lowers to kernels that read `literal` where the program had a CPU value, with no
    copy and no ATen step left (the calls that computed it dropped), and equals eager."""
    g = _lower(ir, f, x)
    _check_placement(g)
    assert literal in _literals(g) and not _copies(g)
    assert not [op for op in g.operations if isinstance(op, L.ExternKernel)]
    _same(ir, _evaluate_on_cpu(ir, g, [x]), f(x))


def test_a_cpu_constant_times_a_cuda_tensor_is_a_literal(ir: Any) -> None:
    def f(x: torch.Tensor) -> tuple[torch.Tensor]:
        return (x * torch.tensor(0.5),)

    # the lift_fresh_copy whose value the kernel took is dropped: no CPU step left
    _folded_away(ir, f, torch.randn(4, 8), 0.5)


def test_where_with_a_cpu_constant(ir: Any) -> None:
    def f(m: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor]:
        return (torch.where(m, x, torch.tensor(0.0)),)

    x = torch.randn(4, 8)
    m = x > 0
    g = _lower(ir, f, m, x)
    _check_placement(g)
    assert 0.0 in _literals(g) and not _copies(g)
    _same(ir, _evaluate_on_cpu(ir, g, [m, x]), f(m, x))


def test_a_cpu_constant_returned_stays_on_the_cpu(ir: Any) -> None:
    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x + 1, torch.tensor(7)

    x = torch.randn(4, 8)
    g = _lower(ir, f, x)
    _check_placement(g)
    out = g.outputs[1]
    assert isinstance(out, L.Buffer) and out.layout.device == CPU
    writer = next(op for op in g.operations if out in op.outputs)
    assert isinstance(writer, L.ExternKernel)  # an ATen call on the CPU, a fresh tensor per call
    assert not writer.fallback  # where a kernel cannot run: intended, not a fallback
    _same(ir, _evaluate_on_cpu(ir, g, [x]), f(x))


def test_a_cpu_scalar_input_is_copied_by_an_explicit_step(ir: Any) -> None:
    def f(x: torch.Tensor, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x * s, (x - s).sum(1)  # one copy serves both kernels

    x, s = torch.randn(4, 8), torch.tensor(2.5)
    g = _lower(ir, f, x, s)
    _check_placement(g)
    copies = _copies(g)
    assert len(copies) == 1
    (src,) = copies[0].tensor_args()
    assert src.storage.name == "arg1" and copies[0].results.layout.device == CUDA
    _same(ir, _evaluate_on_cpu(ir, g, [x, s]), f(x, s))


def test_cpu_constant_arithmetic_folds(ir: Any) -> None:
    def f(x: torch.Tensor) -> tuple[torch.Tensor]:
        return (x + torch.tensor(3) * 2,)  # an ATen op of a known value: evaluated while lowering

    _folded_away(ir, f, torch.randn(4, 8), 6)


def test_a_cpu_constant_moved_to_the_device_is_a_literal(ir: Any) -> None:
    """`torch.tensor(c).type_as(x)` / `.to(x.device)` (DeBERTa-v2's log buckets): the copy of a
    known element is read as that element, converted as the copy converts it, and the copy step
    is dropped (no ATen step left to split a CUDA graph); a copy the graph returns stays."""

    def f(x: torch.Tensor) -> tuple[torch.Tensor]:
        c = torch.full((), 3, dtype=torch.int64).to(x.device, torch.float16)
        return (x * c,)

    def g_(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        c = torch.full((), 0.25).to(x.device)
        return x + c, c

    x = torch.randn(4, 8)
    _folded_away(ir, f, x, 3.0)
    g = _lower(ir, g_, x)
    _check_placement(g)
    assert 0.25 in _literals(g) and len(_copies(g)) == 1, "read as a literal, kept as an output"
    assert g.outputs[1].layout.device == CUDA
    _same(ir, _evaluate_on_cpu(ir, g, [x]), g_(x))


def test_sliding_window_mask_of_a_cpu_constant(ir: Any) -> None:
    window = 3  # transformers builds torch.tensor(self.sliding_window) without a device

    def f(pos: torch.Tensor) -> tuple[torch.Tensor]:
        q = pos[:, None]
        k = pos[None, :]
        return ((q - k < torch.tensor(window)) & (k <= q),)

    pos = torch.arange(6.0)
    g = _lower(ir, f, pos)
    _check_placement(g)
    assert window in _literals(g) and not _copies(g)
    _same(ir, _evaluate_on_cpu(ir, g, [pos]), f(pos))


def test_to_cpu_and_back_are_explicit_copies(ir: Any) -> None:
    def f(x: torch.Tensor, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        host = x.to("cpu")
        return host + 1, host.sum(), x * s.to(x.device)

    x, s = torch.randn(4, 8), torch.tensor(1.5)
    g = _lower(ir, f, x, s)
    _check_placement(g)
    externs = {str(op.kernel) for op in g.operations if isinstance(op, L.ExternKernel)}
    # both copies across devices and the arithmetic on the CPU copy are ATen calls, by design:
    # intended externs, not fallbacks
    assert "aten._to_copy.default" in externs and {"aten.add.Tensor", "aten.sum.dim_IntList"} <= externs
    assert not [op.kernel for op in g.operations if isinstance(op, L.ExternKernel) and op.fallback]
    assert [o.layout.device.type for o in g.outputs] == ["cpu", "cpu", "cuda"]
    _same(ir, _evaluate_on_cpu(ir, g, [x, s]), f(x, s))


def test_a_cpu_index_tensor_of_a_cuda_gather_is_copied(ir: Any) -> None:
    def f(x: torch.Tensor) -> tuple[torch.Tensor]:
        return (x[torch.tensor([2, 0, 1])],)  # eager moves CPU indices to the indexed tensor's device

    x = torch.randn(4, 8)
    g = _lower(ir, f, x)
    _check_placement(g)
    assert len(_copies(g)) == 1
    _same(ir, _evaluate_on_cpu(ir, g, [x]), f(x))


def test_cpu_only_graphs_are_unchanged(ir: Any) -> None:
    def f(x: torch.Tensor, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x * torch.tensor(0.5) * s, torch.tensor(7)

    x, s = torch.randn(4, 8), torch.tensor(2.0)
    g = ir.lower(f, x, s)
    assert not [op for op in g.operations if isinstance(op, L.ExternKernel)]  # all kernels, on the CPU
    assert all(op.output.layout.device == CPU for op in _kernels(g))
    ir.assert_same(ir.evaluate(g, [x, s]), list(f(x, s)))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_folded_constant_keeps_its_dtype_and_casts(ir: Any, dtype: torch.dtype) -> None:
    def f(x: torch.Tensor) -> tuple[torch.Tensor]:
        return (x * torch.tensor(0.1),)  # float32 0.1 rounded to the half type, as eager does

    x = torch.randn(4, 8).to(dtype)
    g = _lower(ir, f, x)
    _check_placement(g)
    assert not _copies(g)
    # the literal computes what a load of the constant computes (the CPU graph loads it)
    (want,) = ir.evaluate(ir.lower(f, x), [x])
    (got,) = _evaluate_on_cpu(ir, g, [x])
    assert torch.equal(got, want)


def test_literals_fold_under_the_callers_fake_mode(ir: Any) -> None:
    """The backend lowers inside the FakeTensorMode of its trace; reading a known CPU value is
    then a real-tensor read that must leave that mode (it raised 'convert all Tensors to
    FakeTensors' there)."""
    x = torch.randn(8)
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    with mode:
        fake = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=CUDA)
    gm = ir.trace(lambda t: (t * torch.tensor(0.5),), fake)
    with FakeTensorMode():  # strict: a real tensor reaching an op inside it raises
        g = L.lower(gm)
    _check_placement(g)
    assert 0.5 in _literals(g)
