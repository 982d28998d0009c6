"""KernelSpec/TensorArg validation."""

from __future__ import annotations

import pytest
import torch
from coil.runtime import KernelSpec, TensorArg

F32 = TensorArg(torch.float32)


def test_spec_is_frozen_hashable_and_equal_by_value() -> None:
    a = KernelSpec("k", "src", (F32, 3), {"B": 8, "A": 1})
    b = KernelSpec("k", "src", [F32, 3], {"A": 1, "B": 8})  # type: ignore[arg-type]
    assert a == b and hash(a) == hash(b)
    assert b.args == (F32, 3)
    with pytest.raises(TypeError):
        a.constexprs["B"] = 16  # type: ignore[index]
    assert a != KernelSpec("k", "src", (F32, 3), {"B": 16, "A": 1})


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"name": "not an id"}, ValueError),
        ({"name": "def"}, ValueError),
        ({"source": "  "}, ValueError),
        ({"args": (torch.float32,)}, TypeError),
        ({"args": (True,)}, TypeError),
        ({"constexprs": {"B": 1.5}}, TypeError),
        ({"constexprs": {"1B": 1}}, ValueError),
        ({"num_warps": 3}, ValueError),
        ({"num_warps": 0}, ValueError),
        ({"num_stages": 0}, ValueError),
    ],
)
def test_spec_validation(kwargs: dict[str, object], error: type[Exception]) -> None:
    fields: dict[str, object] = {"name": "k", "source": "src", "args": (F32,), **kwargs}
    with pytest.raises(error):
        KernelSpec(**fields)  # type: ignore[arg-type]


def test_tensor_arg_needs_a_torch_dtype() -> None:
    with pytest.raises(TypeError):
        TensorArg("float32")  # type: ignore[arg-type]
