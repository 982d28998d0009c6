"""The whole-graph cache (COIL_GRAPH_CACHE): hits in a new process, misses on a changed knob or
input dtype, damaged entries rebuilt without a warning, the debug dir bypassing the lookup.

torch's AOTAutograd cache (COIL_AOT_CACHE, test_aot_cache.py) and coil's frontend cache
(COIL_FRONTEND_CACHE, test_frontend_cache.py) would serve a repeated compile before coil's graph
cache is consulted: they are off here, so these tests see the graph cache alone."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from check import run_both
from coil.backend import COMPILED
from coil.backend.caches.graph_cache import NAMESPACE
from coil.knobs import knobs
from coil.runtime import disk_cache
from fresh_process import run_mlp
from models import MLP


@pytest.fixture(autouse=True)
def _graph_cache_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COIL_AOT_CACHE", "0")  # read by the knobs and inherited by the subprocesses
    monkeypatch.setenv("COIL_FRONTEND_CACHE", "0")

# what the fresh process reports: the error vs eager and each graph's cache verdict and stages
REPORT = ('{"err": err, "graphs": [{"name": s.name, "cache": s.graph_cache, "stages": sorted(s.stage_times), '
          '"kernels": s.kernels, "origins": s.kernel_origins, "fallback": s.eager_fallback} for s in COMPILED]}')


def _run_process(cache: Path) -> dict[str, Any]:
    env = {**knobs.environ(), "COIL_CACHE_DIR": str(cache), "COIL_FALLBACK_ON_ERROR": "0"}
    env.pop("COIL_DEBUG_DIR", None)
    env.pop("COIL_LOGS", None)
    return run_mlp(REPORT, env, timeout=600)


def test_new_process_hits_the_cache_and_runs_no_pipeline(tmp_path: Path) -> None:
    cache = tmp_path / "shared-cache"
    cold = _run_process(cache)
    warm = _run_process(cache)
    assert cold["err"] < 1e-4 and warm["err"] < 1e-4, (cold["err"], warm["err"])
    assert [g["cache"] for g in cold["graphs"]] == ["miss"] * len(cold["graphs"])
    assert [g["cache"] for g in warm["graphs"]] == ["hit"] * len(warm["graphs"])
    assert {g["name"].split("_")[0] for g in warm["graphs"]} == {"forward", "backward", "inference"}
    for g in warm["graphs"]:
        assert g["fallback"] is None
        # no pass, lowering, scheduling or codegen ran: only the lookup and the loading
        assert g["stages"] == ["graph cache", "load", "runtime compile"], g
    assert [(g["kernels"], g["origins"]) for g in warm["graphs"]] == [(g["kernels"], g["origins"]) for g in cold["graphs"]]
    assert len(list((cache / NAMESPACE).rglob("*.blob"))) == len(cold["graphs"])


def _compile_mlp(dtype: torch.dtype = torch.float32) -> None:
    torch._dynamo.reset()
    torch.manual_seed(0)
    run_both(MLP().to(dtype), torch.randn(8, 16, dtype=dtype), train=False,
             atol=1e-4 if dtype == torch.float32 else 1e-8)


def _statuses() -> list[str]:
    statuses = [s.graph_cache for s in COMPILED]
    COMPILED.clear()
    return statuses


def test_changed_knob_or_input_dtype_misses() -> None:
    _compile_mlp()
    compiled = COMPILED[-1].extern_ops
    assert _statuses() == ["miss"]
    _compile_mlp()
    assert COMPILED[-1].extern_ops == compiled and sum(compiled.values()) == COMPILED[-1].externs > 0
    assert _statuses() == ["hit"]
    with knobs.override(fusion=False):
        _compile_mlp()
    assert _statuses() == ["miss"]
    with knobs.override(reduction_strategy="looped"):
        _compile_mlp()
    assert _statuses() == ["miss"]
    _compile_mlp(torch.float64)
    assert _statuses() == ["miss"]
    _compile_mlp()  # the original entry is still there
    assert _statuses() == ["hit"]
    with knobs.override(graph_cache=False):
        _compile_mlp()
    assert _statuses() == ["off"]


def _entries() -> list[Path]:
    root = knobs.cache_dir / NAMESPACE
    return sorted(root.rglob("*.blob"))


def _content(path: Path) -> dict[str, Any]:
    """An entry's document without what names the graph it was compiled as."""
    text = disk_cache.read_blob(path, path.stem)
    assert text is not None
    doc: dict[str, Any] = json.loads(text)
    doc.pop("graph")
    doc["wrapper"] = doc["wrapper"].partition("\n")[2]
    return doc


def _damage(path: Path, how: str) -> None:
    raw = path.read_bytes()
    key = path.stem
    if how == "truncated":
        path.write_bytes(raw[: len(raw) // 2])
    elif how == "flipped":
        i = len(raw) - 100
        path.write_bytes(raw[:i] + bytes([raw[i] ^ 0x01]) + raw[i + 1:])
    elif how == "garbage":
        path.write_bytes(b"\xff\xfe not a cache entry")
    else:  # valid blobs whose content does not fit: another format, a kernel that does not load
        doc = json.loads(raw.partition(b"\n")[2])
        if how == "format":
            doc["format"] = 999
        else:
            doc["kernels"][0]["source"] = "this is not python ("
        disk_cache.write_blob(path, key, json.dumps(doc))


@pytest.mark.parametrize("how", ["truncated", "flipped", "garbage", "format", "bad_kernel"])
def test_damaged_entry_is_rebuilt_without_a_warning(how: str) -> None:
    _compile_mlp()
    assert _statuses() == ["miss"]
    (entry,) = _entries()
    good = _content(entry)
    _damage(entry, how)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _compile_mlp()
    assert _statuses() == ["miss"]  # rebuilt by the full pipeline (and equal to eager: run_both)
    assert _content(entry) == good  # and stored again
    _compile_mlp()
    assert _statuses() == ["hit"]


def test_debug_dir_bypasses_the_lookup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _compile_mlp()
    assert _statuses() == ["miss"]
    monkeypatch.setenv("COIL_DEBUG_DIR", str(tmp_path / "debug"))
    _compile_mlp()
    assert _statuses() == ["bypass"]
    (folder,) = [p for p in (tmp_path / "debug").iterdir() if p.is_dir()]
    for rel in ("02_post_grad_graph.txt", "03_lowered_ir.txt", "04_schedule.txt", "07_wrapper.py"):
        assert (folder / rel).is_file(), rel
    monkeypatch.delenv("COIL_DEBUG_DIR")
    _compile_mlp()
    assert _statuses() == ["hit"]


def test_graph_with_a_tensor_constant_is_cached_by_value() -> None:
    """A get_attr constant is read from the graph at load (never stored) and keyed by its bytes."""
    def run(scale: list[float]) -> None:
        def fn(x: torch.Tensor) -> torch.Tensor:
            return torch.relu(x * torch.tensor(scale))  # a constant of the graph

        torch._dynamo.reset()
        x = torch.randn(4, 3)
        with knobs.override(fallback_on_error=False):
            torch.testing.assert_close(torch.compile(fn, backend="coil")(x), fn(x))

    run([1.0, -2.0, 3.0])
    assert _statuses() == ["miss"]
    run([1.0, -2.0, 3.0])
    assert _statuses() == ["hit"]
    run([1.0, -2.0, 4.0])  # the same graph code and metadata, another value
    assert _statuses() == ["miss"]


def test_dynamic_shape_graph_hits_and_serves_other_sizes() -> None:
    """A graph with size symbols is keyed by their expressions and hints; a hit serves any size."""
    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x * 2.0, dim=-1) + x.sum(0)

    def run(sizes: list[int]) -> None:
        torch._dynamo.reset()
        compiled = torch.compile(fn, backend="coil", dynamic=True)
        with knobs.override(fallback_on_error=False):
            for n in sizes:
                x = torch.randn(n, 7)
                torch.testing.assert_close(compiled(x), fn(x))

    run([8, 5])
    assert _statuses() == ["miss"]
    run([8, 13, 3])
    assert _statuses() == ["hit"]


def test_stage_times_are_recorded_and_logged(caplog: pytest.LogCaptureFixture,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """GraphStats.stage_times holds every stage that ran; COIL_LOGS=compile_time logs them."""
    monkeypatch.setenv("COIL_LOGS", "compile_time")
    with caplog.at_level("INFO", logger="coil.compile_time"):
        _compile_mlp()
        _compile_mlp()
    miss, hit = COMPILED
    assert list(miss.stage_times)[:4] == ["graph cache", "post-grad passes", "lowering", "scheduling"]
    assert all(t >= 0 for t in miss.stage_times.values()) and miss.compile_s > 0
    assert set(hit.stage_times) == {"graph cache", "runtime compile", "load"}
    text = caplog.text
    assert f"{miss.name}: compile time (graph cache miss)" in text and "lowering" in text
    assert f"{hit.name}: compile time (graph cache hit)" in text
