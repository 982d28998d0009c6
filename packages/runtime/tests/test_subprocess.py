"""Two fresh processes, TRITON_INTERPRET unset: concurrent compiles and disk-cache reuse.

Each subprocess imports torch (seconds), so both run once, together, in a module-scoped fixture
(see cache_worker.py for what each does) and the tests check their reports.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from coil.knobs import knobs

WORKER = Path(__file__).with_name("cache_worker.py")


@pytest.fixture(scope="module")
def workers(tmp_path_factory: pytest.TempPathFactory, specs: Any) -> tuple[Path, list[Any]]:
    """(cache dir, the two workers' JSON reports)."""
    tmp = tmp_path_factory.mktemp("subprocess")
    cache_dir, sync = tmp / "cache", tmp / "sync"
    sync.mkdir()
    config = tmp / "config.json"
    config.write_text(
        json.dumps(
            {"sync": str(sync), "add_source": specs.add_source, "rowsum_source": specs.rowsum_source}
        )
    )
    env = knobs.environ(defaults=True, triton_interpret=None, cache_dir=cache_dir)
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), str(config), str(rank)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in (0, 1)
    ]
    reports = []
    for proc in procs:
        out, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, f"worker failed:\n{err[-4000:]}"
        reports.append(json.loads(out.strip().splitlines()[-1]))
    return cache_dir, reports


def test_concurrent_processes_both_succeed(workers: tuple[Path, list[Any]]) -> None:
    cache_dir, (first, second) = workers
    assert first["paths"] == second["paths"]
    assert all(Path(p).is_file() and Path(p).is_relative_to(cache_dir) for p in first["paths"])
    for report in (first, second):
        hits, writes, rebuilds = report["phase1"]
        assert rebuilds == 0 and hits + writes == 2
    assert first["phase1"][1] + second["phase1"][1] >= 2  # each entry written at least once
    leftovers = [p for p in cache_dir.rglob("*") if p.is_file() and p.suffix != ".py"]
    assert not leftovers  # no temporary files left behind


def test_fresh_process_reuses_the_disk_cache(workers: tuple[Path, list[Any]]) -> None:
    _, (writer, reader) = workers
    assert writer["phase2"] == [0, 1, 0]
    assert reader["phase2"] == [1, 0, 0]  # a hit: neither written nor rebuilt
    assert reader["reused_path"] == writer["reused_path"]
    assert reader["reused_stat"] == writer["reused_stat"]  # same file, untouched
    assert Path(reader["reused_path"]).stat().st_mtime_ns == writer["reused_stat"][0]


def test_interpreter_without_env_and_triton_imported_first(
    workers: tuple[Path, list[Any]],
) -> None:
    """TRITON_INTERPRET unset and, in rank 0, triton imported before coil: the kernels ran (the
    workers check them against torch) and Triton's library was left in compiled mode."""
    for report in workers[1]:
        assert report["library_compiled_mode"] and report["jit_call_restored"]
