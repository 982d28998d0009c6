"""coil.backend.pipeline.lazy_table: the decomposition table is built at its first read, once."""

from __future__ import annotations

import threading

import torch
from coil.backend.pipeline.lazy_table import LazyTable
from coil.lowering_ir import decomposition_table


def test_built_once_at_the_first_read_and_read_like_a_dict() -> None:
    calls: list[int] = []

    def build() -> dict[str, int]:
        calls.append(1)
        return {"a": 1, "b": 2}

    t = LazyTable(build)
    assert not t.built and calls == [] and repr(t) == "LazyTable(not built)"
    assert t["a"] == 1 and calls == [1] and t.built
    assert {**t} == dict(t) == {"a": 1, "b": 2} and len(t) == 2 and "b" in t and "c" not in t
    assert (t or {}) is t and t.get("c", 3) == 3 and sorted(t) == ["a", "b"]
    assert calls == [1] and repr(t) == "LazyTable(2 entries)"


def test_concurrent_first_reads_build_once() -> None:
    calls: list[int] = []
    gate = threading.Event()

    def build() -> dict[int, int]:
        calls.append(1)
        gate.wait(1.0)
        return {1: 1}

    t = LazyTable(build)
    threads = [threading.Thread(target=lambda: t[1]) for _ in range(4)]
    for th in threads:
        th.start()
    gate.set()
    for th in threads:
        th.join()
    assert calls == [1]


def test_the_backends_table_equals_lowering_irs_and_is_a_copy() -> None:
    from coil.backend.pipeline.backend import _decompositions

    a, b = _decompositions(), _decompositions()
    ref = decomposition_table()
    # the same ops (torch builds some of its functions anew for each table)
    assert set(a) == set(ref) and torch.ops.aten.max_pool2d_with_indices.default in a
    a._get().clear()  # one backend call's copy: another call's is untouched
    assert set(b) == set(ref) and len(a) == 0
