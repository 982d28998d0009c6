"""run_chunks.py (`nox -s fuzz`): chunking, and a failing or crashing chunk reported with its seed.

A stand-in for run_many.py (no torch, instant) passes, fails or segfaults depending on the seed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from . import run_chunks

FAKE_RUN_MANY = '''\
import os, signal, sys
n, seed, current = int(sys.argv[1]), int(sys.argv[3]), sys.argv[5]
open(current, "w").write(f"program {seed}\\n")
if seed == 11:
    os.kill(os.getpid(), signal.SIGSEGV)
if seed == 12:
    print("[2] mismatch: output 0")
    print(f"\\n{n} programs in 0s; 1 failures, 1 distinct")
    print("=" * 100)
    print("reduced reproducer of seed 12")
    sys.exit(1)
print(f"\\n{n} programs in 0s; 0 failures, 0 distinct")
'''


def test_chunks_split_the_count() -> None:
    assert run_chunks.chunks(10000, 500, 7)[-1] == run_chunks.Chunk(26, 500)
    assert len(run_chunks.chunks(10000, 500, 7)) == 20
    assert [c.size for c in run_chunks.chunks(7, 3, 0)] == [3, 3, 1]
    with pytest.raises(ValueError):
        run_chunks.chunks(0, 3, 0)


def test_each_chunk_is_a_process_and_failures_name_their_seed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = tmp_path / "fake_run_many.py"
    fake.write_text(FAKE_RUN_MANY)
    monkeypatch.setattr(run_chunks, "RUN_MANY", fake)
    code = run_chunks.main(["8", "--chunk", "2", "--seed", "10", "--jobs", "2", "--out", str(tmp_path / "logs")])
    out = capsys.readouterr().out
    assert code == 1
    assert "seeds 10..13" in out and "2 of 4 chunks passed" in out
    assert "seed 10 (2 programs): ok" in out and "seed 13 (2 programs): ok" in out
    assert "seed 11 (2 programs): crashed (SIGSEGV)" in out and "program 11" in out  # the program running
    assert "seed 12 (2 programs): failed" in out and "reduced reproducer of seed 12" in out
    assert f"{fake} 2 --seed 12 -v" in out  # how to rerun the failing chunk
    assert sorted(p.name for p in (tmp_path / "logs").glob("*.log")) == [f"chunk_{s}.log" for s in range(10, 14)]
