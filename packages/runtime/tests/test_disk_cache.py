"""The on-disk cache: layout, atomic writes, corrupted entries rebuilt."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from coil.runtime import KernelCompileError, compile_kernels, disk_cache
from coil.runtime.compile import clear_memo
from coil.runtime.disk_cache import (
    cache_stats,
    ensure_entry,
    entry_path,
    render_entry,
    reset_cache_stats,
    source_key,
)

CPU = torch.device("cpu")


def test_key_depends_on_source_and_versions() -> None:
    base = source_key("src", "3.6.0", "2.11.0")
    assert len(base) == 64
    assert base == source_key("src", "3.6.0", "2.11.0")
    others = {source_key("src2", "3.6.0", "2.11.0"), source_key("src", "3.9.0", "2.11.0"),
              source_key("src", "3.6.0", "2.15.0")}
    assert base not in others and len(others) == 3
    assert entry_path(Path("/c"), base) == Path("/c/kernels") / base[:2] / f"{base}.py"


def test_ensure_entry_outcomes(tmp_path: Path) -> None:
    reset_cache_stats()
    path = tmp_path / "kernels" / "ab" / "abcd.py"
    text = render_entry("abcd", "x = 1")
    assert ensure_entry(path, text) == "written"
    mtime = path.stat().st_mtime_ns
    assert ensure_entry(path, text) == "hit"
    assert path.stat().st_mtime_ns == mtime
    path.write_text(text.replace("abcd", "ffff"))  # wrong key recorded
    assert ensure_entry(path, text) == "rebuilt"
    assert path.read_text() == text
    assert [p.name for p in path.parent.iterdir()] == ["abcd.py"]  # no temp files left
    assert (cache_stats().hits, cache_stats().writes, cache_stats().rebuilds) == (1, 1, 1)


def _entry(cache_dir: Path) -> Path:
    (path,) = cache_dir.rglob("*.py")
    return path


@pytest.mark.parametrize(
    "corrupt",
    [
        pytest.param(lambda t: b"\xff\xfe\x00garbage", id="not-utf8"),
        pytest.param(lambda t: t[: len(t) // 2], id="truncated"),
        pytest.param(lambda t: b"", id="empty"),
        pytest.param(lambda t: t.replace(b"coil-cache-key: ", b"coil-cache-key: 0"), id="wrong-key"),
        pytest.param(lambda t: t.replace(b"x + y", b"x - y"), id="edited"),
        pytest.param(lambda t: t + b"\nimport no_such_module_anywhere\n", id="import-error"),
    ],
)
def test_corrupted_entry_is_rebuilt(cache_dir: Path, specs: Any, corrupt: Any) -> None:
    compile_kernels([specs.add()], CPU)
    path = _entry(cache_dir)
    good = path.read_bytes()
    path.write_bytes(corrupt(good))
    clear_memo()
    reset_cache_stats()
    kernel = compile_kernels([specs.add()], CPU)["add_kernel"]
    assert cache_stats().rebuilds == 1
    assert path.read_bytes() == good
    x, y, out = torch.randn(10), torch.randn(10), torch.empty(10)
    kernel((1,), x, y, out, 10)
    assert torch.allclose(out, x + y)


def test_unwritable_entry_is_a_compile_error(cache_dir: Path, specs: Any) -> None:
    compile_kernels([specs.add()], CPU)
    path = _entry(cache_dir)
    path.unlink()
    path.mkdir()  # a directory where the file should be: cannot be read nor replaced
    clear_memo()
    with pytest.raises(KernelCompileError) as info:
        compile_kernels([specs.add()], CPU)
    assert info.value.path == path and isinstance(info.value.__cause__, OSError)


def test_blob_round_trip_and_layout(tmp_path: Path) -> None:
    key = "ab" + "0" * 62
    path = disk_cache.blob_path(tmp_path, "graphs", key)
    assert path == tmp_path / "graphs" / "ab" / f"{key}.blob"
    assert disk_cache.read_blob(path, key) is None  # missing
    disk_cache.write_blob(path, key, "payload \u00e9\n")
    assert disk_cache.read_blob(path, key) == "payload \u00e9\n"
    assert disk_cache.read_blob(path, "cd" + "0" * 62) is None  # recorded under another key
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left
    with pytest.raises(ValueError):
        disk_cache.blob_path(tmp_path, "../x", key)
    with pytest.raises(ValueError):
        disk_cache.blob_path(tmp_path, "graphs", "../" + key)


@pytest.mark.parametrize("damage", ["truncate", "flip", "header", "empty", "not utf-8"])
def test_damaged_blob_reads_as_none_without_a_warning(tmp_path: Path, damage: str,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    key = "ef" + "1" * 62
    path = disk_cache.blob_path(tmp_path, "graphs", key)
    disk_cache.write_blob(path, key, "x" * 200)
    raw = path.read_bytes()
    damaged = {
        "truncate": raw[:-10],
        "flip": raw[:-5] + b"y" + raw[-4:],
        "header": raw.replace(b"coil-blob-v1", b"coil-blob-v0", 1),
        "empty": b"",
        "not utf-8": raw.partition(b"\n")[0] + b"\n" + b"\xff" * 200,
    }[damage]
    path.write_bytes(damaged)
    with caplog.at_level("INFO", logger="coil.runtime"):
        assert disk_cache.read_blob(path, key) is None
    assert not [r for r in caplog.records if r.levelno >= 30]  # reported at INFO, not as a warning
    disk_cache.write_blob(path, key, "x" * 200)  # a rewrite replaces it
    assert disk_cache.read_blob(path, key) == "x" * 200
