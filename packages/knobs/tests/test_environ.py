"""The environment helpers: environ (a child's environment), export, export_default, replace_environ."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from coil.knobs import knobs


def test_environ_is_a_copy_with_typed_values(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("COIL_FUSION", "1")
    monkeypatch.setenv("SOMETHING_ELSE", "kept")
    env = knobs.environ(fusion=False, cache_dir=tmp_path, order_time=2, channels_last=None)
    assert env["COIL_FUSION"] == "0" and env["COIL_CACHE_DIR"] == str(tmp_path)
    assert env["COIL_ORDER_TIME"] == "2.0" and "COIL_CHANNELS_LAST" not in env
    assert env["SOMETHING_ELSE"] == "kept"
    env["COIL_FUSION"] = "changed"
    assert knobs.fusion is True  # a copy: this process is untouched


def test_environ_values_are_checked_and_round_trip(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="COIL_COMPILE_THREADS"):
        knobs.environ(compile_threads=0)
    with pytest.raises(ValueError, match="override"):
        knobs.environ(cuda_graph_segments_uncaptured=True)  # no variable reaches it
    for name, value in (("verify", True), ("split_reduction_min", 2), ("order_time", 0.25),
                        ("channels_last", False), ("logs", "fusion,kernels")):
        var = knobs.knob(name).env
        monkeypatch.setenv(var, knobs.environ(**{name: value})[var])  # type: ignore[arg-type]
        assert getattr(knobs, name) == value


def test_environ_defaults_drops_coil_variables_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COIL_FUSION", "0")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    env = knobs.environ(defaults=True, verify=True)
    assert "COIL_FUSION" not in env and env["COIL_VERIFY"] == "1"
    assert env["TRITON_INTERPRET"] == "1"  # foreign: dropped only when asked
    assert "TRITON_INTERPRET" not in knobs.environ(triton_interpret=None)


def test_environ_is_what_a_child_reads(tmp_path: Path) -> None:
    env = knobs.environ(defaults=True, fusion=False, cache_dir=tmp_path)
    code = "from coil.knobs import knobs; print(knobs.fusion, knobs.cache_dir)"
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True)
    assert out.stdout.split() == ["False", str(tmp_path)]


def test_export_and_export_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COIL_CHECK_NAN", raising=False)
    monkeypatch.setenv("COIL_VERIFY", "0")
    try:
        knobs.export_default(verify=True, check_nan=True)
        assert knobs.verify is False  # set by the user: kept
        assert knobs.check_nan is True
        knobs.export(verify=True, check_nan=None)
        assert knobs.verify is True and "COIL_CHECK_NAN" not in knobs.environ()
    finally:
        knobs.export(check_nan=None)


def test_replace_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COIL_FUSION", "1")
    saved = knobs.environ()
    try:
        knobs.replace_environ({**saved, "COIL_FUSION": "0", "COIL_TEST_ONLY_VAR": "x"})
        assert knobs.fusion is False and knobs.environ()["COIL_TEST_ONLY_VAR"] == "x"
    finally:
        knobs.replace_environ(saved)
    assert knobs.environ() == saved
