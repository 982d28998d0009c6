"""launchers.prebuild: one host launcher built per signature, before the first launch, never raising.

Triton's driver is replaced by one that records what it is asked to build (the real one needs a
GPU); the oracle is that record, against the signatures counted by hand.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import pytest
from coil.runtime import launchers


class _Driver:
    def __init__(self, fail: bool = False) -> None:
        self.built: list[str] = []
        self.fail = fail
        self.lock = threading.Lock()

    def launcher_cls(self, src: Any, metadata: Any) -> None:
        if self.fail:
            raise RuntimeError("no C compiler here")
        with self.lock:
            self.built.append(metadata)


def _compiled(name: str, signature: dict[str, str], constants: dict[str, int], loaded: bool = False) -> Any:
    return SimpleNamespace(src=SimpleNamespace(signature=signature, constants=constants), metadata=name,
                           module=object() if loaded else None)


@pytest.fixture
def driver(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> _Driver:
    from triton.runtime.driver import driver as triton_driver

    d = _Driver()
    monkeypatch.setattr(triton_driver, "_active", d)
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))  # the process-wide record is per cache folder
    return d


def test_one_launcher_per_signature_and_none_for_a_kernel_already_launched(driver: _Driver) -> None:
    add = {"x": "*fp32", "y": "*fp32", "n": "i32", "BLOCK": "constexpr"}
    kernels = [
        _compiled("add64", add, {"BLOCK": 64}),
        _compiled("add256", add, {"BLOCK": 256}),  # the same signature: one launcher for both
        _compiled("add_half", {**add, "x": "*fp16"}, {"BLOCK": 64}),
        _compiled("rowsum", {"x": "*fp32", "out": "*fp32"}, {}, loaded=True),  # launched: it has one
    ]
    assert launchers.prebuild(kernels, threads=4) == 2
    assert sorted(driver.built) == ["add64", "add_half"]
    assert launchers.prebuild([_compiled("add1024", add, {"BLOCK": 1024})], threads=4) == 0  # built before
    assert len(driver.built) == 2


def test_a_launcher_that_fails_to_build_costs_nothing(monkeypatch: pytest.MonkeyPatch, driver: _Driver) -> None:
    driver.fail = True
    assert launchers.prebuild([_compiled("k", {"x": "*fp32"}, {})], threads=1) == 0  # no exception


def test_a_kernel_without_a_signature_is_left_to_its_first_launch(driver: _Driver) -> None:
    assert launchers.prebuild([SimpleNamespace(src=None, metadata="k", module=None)], threads=2) == 0
    assert driver.built == []
