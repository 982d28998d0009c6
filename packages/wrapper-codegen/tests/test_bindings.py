"""Each extern the Python wrapper calls through a torch binding computes what its OpOverload does."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from coil.wrapper_codegen import emit_line
from coil.wrapper_codegen.bindings import PUBLIC, python_callee
from coil.wrapper_codegen.lines import ExternCall, Ref

aten = torch.ops.aten


def _cpu_cases() -> dict[str, tuple[tuple[object, ...], dict[str, object]]]:
    g = torch.Generator().manual_seed(0)

    def r(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    return {
        "convolution": ((r(2, 4, 7, 7), r(6, 2, 3, 3), r(6), [2, 1], [1, 0], [1, 2], False, [0, 0], 2), {}),
        "mm": ((r(3, 5), r(5, 4)), {}),
        "addmm": ((r(4), r(3, 5), r(5, 4)), {"beta": 0.5, "alpha": 2.0}),
        "bmm": ((r(2, 3, 5), r(2, 5, 4)), {}),
        "baddbmm": ((r(2, 3, 4), r(2, 3, 5), r(2, 5, 4)), {"beta": 0.25}),
    }


def _meta_cases() -> dict[str, tuple[tuple[object, ...], dict[str, object]]]:
    """The fused attention kernel runs on CUDA only; its binding is checked on the meta
    device (same overload chosen: same results' number, shapes, strides and dtypes)."""
    q = torch.empty(2, 3, 16, 8, device="meta", dtype=torch.float16)
    bias = torch.empty(2, 3, 16, 16, device="meta", dtype=torch.float16)
    return {
        "_scaled_dot_product_efficient_attention": ((q, q, q, bias, True, 0.0, False), {"scale": 0.5}),
    }


def _binding(name: str) -> Callable[..., object]:
    callee = python_callee(f"torch.ops.aten.{name}.default")
    assert callee == f"torch.{name}"
    fn = torch
    for part in callee.split(".")[1:]:
        fn = getattr(fn, part)
    return fn  # type: ignore[return-value]


def _flat(x: object) -> list[object]:
    """The results as a flat list: (shape, stride, dtype) per tensor, the type of anything else."""
    if isinstance(x, torch.Tensor):
        return [(x.shape, x.stride(), x.dtype)]
    if isinstance(x, tuple | list):
        return [t for v in x for t in _flat(v)]
    return [type(x)]


def test_every_entry_has_a_case() -> None:
    assert set(_cpu_cases()) | set(_meta_cases()) == PUBLIC


@pytest.mark.parametrize("name", sorted(_cpu_cases()))
def test_binding_equals_overload_on_cpu(name: str) -> None:
    args, kwargs = _cpu_cases()[name]
    want = getattr(aten, name).default(*args, **kwargs)
    got = _binding(name)(*args, **kwargs)
    torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("name", sorted(_meta_cases()))
def test_binding_selects_the_default_overload(name: str) -> None:
    args, kwargs = _meta_cases()[name]
    want = _flat(getattr(aten, name).default(*args, **kwargs))
    got = _flat(_binding(name)(*args, **kwargs))
    assert got == want


def test_other_externs_keep_the_overload() -> None:
    # flash and cuDNN attention's bindings return their integer results as tensors
    for op in ("torch.ops.aten._scaled_dot_product_cudnn_attention.default",
               "torch.ops.aten._scaled_dot_product_flash_attention.default", "torch.ops.aten.mm.out", "torch.ops.aten.sort.default", "torch.ops.aten.add.Tensor",
               "torch.ops._c10d_functional.all_reduce.default", "torch.ops.higher_order.with_effects"):
        assert python_callee(op) == op


def test_emitted_line_uses_the_binding() -> None:
    line = ExternCall("torch.ops.aten.mm.default", (Ref("a"), Ref("b")), (), Ref("c"), ())
    assert emit_line(line) == ["c = torch.mm(a, b, )"]
