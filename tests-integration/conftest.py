"""Shared fixtures: the device (CUDA when present, else CPU through the Triton interpreter), and
a fresh coil cache per test (COIL_CACHE_DIR): a test's compiles go through the whole pipeline
(and store their graphs), never reuse a graph another test compiled (a test may patch a stage).
The fx-passes verifier runs after every pass (COIL_VERIFY=1 unless the caller set it), in this
process and in the processes tests start."""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from coil.knobs import knobs

sys.path.insert(0, str(Path(__file__).parent))
knobs.export_default(verify=True)


@pytest.fixture
def pad_mm_on_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """fx-passes' pad_matmul_strides applied to CPU products of any size (it rewrites only CUDA
    products above its MIN_WORK), so the interpreter runs the rewritten graphs."""
    from coil.fx_passes.passes import pad_mm

    monkeypatch.setattr(pad_mm, "pad_matmul_strides_for",
                        functools.partial(pad_mm.pad_matmul_strides_for, devices=("cpu", "cuda"), min_work=0))


@pytest.fixture
def device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


@pytest.fixture(autouse=True)
def _fresh() -> None:
    import coil.backend

    torch._dynamo.reset()
    coil.backend.reset()


@pytest.fixture
def runners(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every CUDA-graph runner built during the test, in order (coil.runtime.call_sites and
    coil.runtime.segments build them through a subclass that records its instances)."""
    import coil.runtime.segments as segments
    from coil.runtime import call_sites, cudagraph

    made: list[Any] = []

    class Recording(cudagraph.CudaGraphRunner):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(call_sites, "CudaGraphRunner", Recording)
    monkeypatch.setattr(segments, "CudaGraphRunner", Recording)
    return made


@pytest.fixture(autouse=True)
def _fresh_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COIL_CACHE_DIR", str(tmp_path / "coil-cache"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the tests known to fail on a CUDA device or under Triton < 3.9's interpreter
    (gpu_known_failures.py) xfail, not strict, with the reason seen."""
    from gpu_known_failures import reason_for

    cuda = torch.cuda.is_available()
    import triton

    before_3_9 = tuple(int(p) for p in triton.__version__.split(".")[:2]) < (3, 9)
    if not (cuda or before_3_9):
        return
    for item in items:
        nodeid = item.nodeid.split("/")[-1]
        why = reason_for(nodeid, cuda=cuda, triton_before_3_9=before_3_9)
        if why is not None:
            item.add_marker(pytest.mark.xfail(reason=why, strict=False))
