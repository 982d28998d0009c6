"""Reading knobs from the environment: each type's parsing, defaults, and errors naming the variable."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from coil.knobs import knobs


@pytest.mark.parametrize(("raw", "want"), [
    ("1", True), ("true", True), ("YES", True), (" on ", True),
    ("0", False), ("false", False), ("No", False), ("off", False), ("", False),
])
def test_bool_spellings(monkeypatch: pytest.MonkeyPatch, raw: str, want: bool) -> None:
    monkeypatch.setenv("COIL_FUSION", raw)
    assert knobs.fusion is want


def test_unset_reads_the_default_and_every_read_sees_the_environment_now(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COIL_FUSION", raising=False)
    assert knobs.fusion is True
    monkeypatch.setenv("COIL_FUSION", "0")
    assert knobs.fusion is False  # not cached
    monkeypatch.delenv("COIL_FUSION")
    assert knobs.fusion is True


@pytest.mark.parametrize(("env", "attr", "raw"), [
    ("COIL_FUSION", "fusion", "maybe"),
    ("COIL_VERIFY", "verify", "2"),
    ("COIL_AUTOTUNE_MIN_BYTES", "autotune_min_bytes", "lots"),
    ("COIL_ORDER_TIME", "order_time", "soon"),
    ("COIL_COMPILE_THREADS", "compile_threads", "zero"),
    ("COIL_COMPILE_THREADS", "compile_threads", "0"),
    ("COIL_COMPILE_WORKERS", "compile_workers", "-1"),
    ("COIL_CACHE_DIR", "cache_dir", " "),
    ("COIL_CHANNELS_LAST", "channels_last", "sometimes"),
    ("COIL_SPLIT_REDUCTION_MIN", "split_reduction_min", "4k"),
    ("COIL_BENCH_WARM_RUNS", "bench_warm_runs", "0"),
])
def test_malformed_values_raise_naming_the_variable(monkeypatch: pytest.MonkeyPatch, env: str, attr: str,
                                                    raw: str) -> None:
    monkeypatch.setenv(env, raw)
    with pytest.raises(ValueError, match=env):
        getattr(knobs, attr)


def test_numbers_paths_and_text(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COIL_AUTOTUNE_MIN_BYTES", "0")
    monkeypatch.setenv("COIL_ORDER_TIME", "2")
    monkeypatch.setenv("COIL_CACHE_DIR", "~/elsewhere")
    monkeypatch.setenv("COIL_REDUCTION_STRATEGY", "looped")
    monkeypatch.setenv("COIL_SPLIT_REDUCTION_MIN", "2")
    assert knobs.autotune_min_bytes == 0
    assert knobs.order_time == 2.0 and isinstance(knobs.order_time, float)
    assert knobs.cache_dir == Path.home() / "elsewhere"
    assert knobs.reduction_strategy == "looped"
    assert knobs.split_reduction_min == 2


def test_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for env in ("COIL_CACHE_DIR", "COIL_AUTOTUNE", "COIL_SPLIT_REDUCTION_MIN", "COIL_CHANNELS_LAST",
                "COIL_BENCH_WARM_RUNS", "COIL_LOGS", "TRITON_INTERPRET"):
        monkeypatch.delenv(env, raising=False)
    assert knobs.cache_dir == Path.home() / ".cache" / "coil"
    assert knobs.autotune == "auto" and knobs.logs == ""
    assert knobs.split_reduction_min == 4096
    assert knobs.channels_last is None
    assert knobs.bench_warm_runs == 3
    assert knobs.triton_interpret is False


def test_auto_bool(monkeypatch: pytest.MonkeyPatch) -> None:
    for raw, want in (("1", True), ("0", False), ("auto", None), ("", None), ("AUTO", None)):
        monkeypatch.setenv("COIL_CHANNELS_LAST", raw)
        assert knobs.channels_last is want


def test_empty_count_reads_its_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COIL_BENCH_WARM_RUNS", "")
    assert knobs.bench_warm_runs == 3
    monkeypatch.setenv("COIL_BENCH_WARM_RUNS", "5")
    assert knobs.bench_warm_runs == 5


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
    assert knobs.local_world_size is None and knobs.compile_workers == 32
    monkeypatch.setenv("COIL_COMPILE_WORKERS", "0")
    assert knobs.compile_workers == 0


def test_override_only_knobs_ignore_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert knobs.cuda_graph_segments_uncaptured is False
    assert knobs.aot_compile is True
    with knobs.override(cuda_graph_segments_uncaptured=True, aot_compile=False):
        assert knobs.cuda_graph_segments_uncaptured is True and knobs.aot_compile is False


def test_runtime_knobs_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for env in ("COIL_CACHE_DIR", "COIL_COMPILE_THREADS", "COIL_FAST_LAUNCH", "TRITON_INTERPRET"):
        monkeypatch.delenv(env, raising=False)
    assert 1 <= knobs.compile_threads <= 32
    assert knobs.fast_launch is True and knobs.triton_interpret is False
    monkeypatch.setenv("COIL_COMPILE_THREADS", "3")
    monkeypatch.setenv("COIL_FAST_LAUNCH", "off")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert knobs.compile_threads == 3
    assert knobs.fast_launch is False and knobs.triton_interpret is True
    monkeypatch.setenv("COIL_FAST_LAUNCH", "maybe")
    with pytest.raises(ValueError, match="COIL_FAST_LAUNCH"):
        _ = knobs.fast_launch


def test_fx_passes_knobs_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COIL_VERIFY", "0")
    monkeypatch.setenv("COIL_REINPLACE", "1")
    assert knobs.verify is False and knobs.reinplace is True
    with knobs.override(verify=True):
        assert knobs.verify is True
    assert knobs.verify is False
