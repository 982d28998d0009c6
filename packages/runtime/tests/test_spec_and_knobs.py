"""KernelSpec/TensorArg validation and the knobs module."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from coil.runtime import KernelSpec, TensorArg
from coil.runtime.knobs import knobs, override

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


def test_knob_defaults_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for env in knobs.env_names().values():
        monkeypatch.delenv(env, raising=False)
    assert knobs.cache_dir == Path.home() / ".cache" / "coil"
    assert 1 <= knobs.compile_threads <= 32
    assert knobs.aot_compile is True and knobs.triton_interpret is False
    monkeypatch.setenv("COIL_CACHE_DIR", "~/elsewhere")
    monkeypatch.setenv("COIL_COMPILE_THREADS", "3")
    monkeypatch.setenv("COIL_AOT_COMPILE", "off")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert knobs.cache_dir == Path.home() / "elsewhere"
    assert knobs.compile_threads == 3
    assert knobs.aot_compile is False and knobs.triton_interpret is True
    monkeypatch.setenv("COIL_COMPILE_THREADS", "zero")
    with pytest.raises(ValueError, match="COIL_COMPILE_THREADS"):
        _ = knobs.compile_threads
    monkeypatch.setenv("COIL_AOT_COMPILE", "maybe")
    with pytest.raises(ValueError, match="COIL_AOT_COMPILE"):
        _ = knobs.aot_compile


def test_compile_parallelism_defaults_share_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    for env in ("COIL_COMPILE_THREADS", "COIL_COMPILE_WORKERS", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(env, raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(48)), raising=False)
    assert knobs.compile_workers == knobs.compile_threads == 32  # capped
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")  # eight ranks on this host (torchrun)
    assert knobs.compile_workers == knobs.compile_threads == 6
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "64")
    assert knobs.compile_workers == 1  # never 0: 0 is only ever asked for
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "junk")  # not a launcher's count: ignored
    assert knobs.compile_workers == 32
    monkeypatch.setenv("COIL_COMPILE_WORKERS", "0")
    assert knobs.compile_workers == 0
    monkeypatch.setenv("COIL_COMPILE_WORKERS", "-1")
    with pytest.raises(ValueError, match="COIL_COMPILE_WORKERS"):
        _ = knobs.compile_workers


def test_override_is_scoped_nested_and_validated(tmp_path: Path) -> None:
    before = knobs.compile_threads
    with override(compile_threads=2, cache_dir=tmp_path):
        assert knobs.compile_threads == 2 and knobs.cache_dir == tmp_path
        with override(compile_threads=5):
            assert knobs.compile_threads == 5 and knobs.cache_dir == tmp_path
        assert knobs.compile_threads == 2
    assert knobs.compile_threads == before
    with pytest.raises(ValueError), override(compile_threads=0):
        pass
    with pytest.raises(AttributeError, match="nope"), override(nope=1):
        pass
