"""knobs.override: scoping, nesting, validation, unknown names."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from coil.knobs import UnknownKnobError, knobs


def test_override_is_scoped_and_nested(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("COIL_COMPILE_THREADS", "3")
    with knobs.override(compile_threads=2, cache_dir=tmp_path) as k:
        assert k is knobs
        assert knobs.compile_threads == 2 and knobs.cache_dir == tmp_path
        with knobs.override(compile_threads=5):
            assert knobs.compile_threads == 5 and knobs.cache_dir == tmp_path
        assert knobs.compile_threads == 2
    assert knobs.compile_threads == 3


def test_override_wins_over_the_environment_and_is_undone_on_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COIL_FUSION", "1")
    with pytest.raises(RuntimeError), knobs.override(fusion=False):
        assert knobs.fusion is False
        raise RuntimeError
    assert knobs.fusion is True


def test_override_values_are_checked() -> None:
    with pytest.raises(ValueError, match="COIL_COMPILE_THREADS"), knobs.override(compile_threads=0):
        pass
    with pytest.raises(ValueError, match="COIL_GRAPH_POOL_EXPANDABLE"), knobs.override(graph_pool_expandable="maybe"):
        pass
    with pytest.raises(TypeError, match="verify"), knobs.override(verify=None):
        pass
    with pytest.raises(TypeError, match="order_time"), knobs.override(order_time=True):
        pass
    with pytest.raises(TypeError, match="fusion"), knobs.override(fusion=1):
        pass


def test_override_converts_like_the_environment(tmp_path: Path) -> None:
    with knobs.override(order_time=2, aot_cache="off", cache_dir=str(tmp_path), debug_dir=tmp_path,
                        channels_last=None, autotune_min_bytes="7"):
        assert knobs.order_time == 2.0 and isinstance(knobs.order_time, float)
        assert knobs.aot_cache is False
        assert knobs.cache_dir == tmp_path
        assert knobs.debug_dir == str(tmp_path)
        assert knobs.channels_last is None
        assert knobs.autotune_min_bytes == 7


def test_unknown_names_raise_naming_the_known_ones() -> None:
    with pytest.raises(AttributeError, match=r"nope.*known: .*fusion"):
        _ = knobs.nope
    with pytest.raises(KeyError, match="nope"), knobs.override(nope=1):
        pass
    with pytest.raises(UnknownKnobError):
        knobs.knob("nope")
    assert getattr(knobs, "nope", "fallback") == "fallback"
    with pytest.raises(AttributeError):
        _ = knobs._private


def test_overrides_are_process_wide() -> None:
    seen: list[bool] = []
    with knobs.override(check_nan=True):
        t = threading.Thread(target=lambda: seen.append(knobs.check_nan))
        t.start()
        t.join()
    assert seen == [True]
