"""Run the graph fuzzer in chunks, each chunk a separate `run_many.py` process (`nox -s fuzz`).

    python tests-integration/fuzz/run_chunks.py N [--chunk 500] [--seed BASE] [--jobs J]
                                                 [--timeout SECONDS] [--max-ops K] [--out DIR]

N programs are split into ceil(N / chunk) chunks; chunk i runs `run_many.py <size> --seed BASE+i`
(hypothesis derives its programs from the seed, so a chunk is reproduced by running that command
again). A chunk that fails (a mismatch or a Python error: exit status 1), crashes (a signal, e.g.
a segfault) or times out is reported with its seed — for a crash, with the program it was running
(`--current`) — and the run goes on with the next chunk. Each chunk's output is kept in
`DIR/chunk_<seed>.log` (DIR: --out, else a new temporary folder, printed). Exit status 1 if any
chunk did not pass. BASE defaults to a random number, printed first.
"""

from __future__ import annotations

import argparse
import random
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

RUN_MANY = Path(__file__).resolve().with_name("run_many.py")
SUMMARY_MARK = " programs in "  # run_many's summary line: "<n> programs in <t>s; <k> failures, ..."


@dataclass(frozen=True)
class Chunk:
    seed: int
    size: int


@dataclass(frozen=True)
class Outcome:
    chunk: Chunk
    status: str  # "ok", "failed", "crashed (signal N)", "exit N", "timed out"
    seconds: float
    log: Path
    detail: str  # failures found / the program running when it crashed


def chunks(n: int, size: int, base: int) -> list[Chunk]:
    """`n` programs as chunks of `size` (the last one smaller), seeds base, base+1, ..."""
    if n < 1 or size < 1:
        raise ValueError("the number of programs and the chunk size must be positive")
    return [Chunk(base + i, min(size, n - start)) for i, start in enumerate(range(0, n, size))]


def _command(chunk: Chunk, current: Path, max_ops: int | None) -> list[str]:
    cmd = [sys.executable, str(RUN_MANY), str(chunk.size), "--seed", str(chunk.seed), "--current", str(current)]
    return cmd + (["--max-ops", str(max_ops)] if max_ops is not None else [])


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def run_chunk(chunk: Chunk, out: Path, timeout: float | None, max_ops: int | None) -> Outcome:
    """Run one chunk in its own process; never raises for what happens inside it."""
    log = out / f"chunk_{chunk.seed}.log"
    current = out / f"chunk_{chunk.seed}_current.py"
    start = time.time()
    with log.open("w") as f:
        try:
            code = subprocess.run(_command(chunk, current, max_ops), stdout=f, stderr=subprocess.STDOUT,
                                  timeout=timeout, check=False).returncode
        except subprocess.TimeoutExpired:
            code = None
    seconds = time.time() - start
    text = log.read_text(errors="replace")
    if code == 0:
        return Outcome(chunk, "ok", seconds, log, "")
    if code == 1 and SUMMARY_MARK in text:  # finished, found failures: the summary and reproducers
        return Outcome(chunk, "failed", seconds, log, text[text.rfind("\n", 0, text.rindex(SUMMARY_MARK)) + 1:])
    running = current.read_text() if current.exists() else "(unknown)\n"
    status = ("timed out" if code is None else f"crashed ({_signal_name(code)})" if code < 0 else f"exit {code}")
    tail = "\n".join(text.splitlines()[-20:])
    return Outcome(chunk, status, seconds, log, f"last output:\n{tail}\nprogram running at the time:\n{running}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("n", type=int, help="number of programs in all")
    ap.add_argument("--chunk", type=int, default=500, help="programs per process (default 500)")
    ap.add_argument("--seed", type=int, default=None, help="seed of the first chunk (default: random)")
    ap.add_argument("--jobs", type=int, default=1, help="chunks run at once (default 1)")
    ap.add_argument("--timeout", type=float, default=None, help="seconds a chunk may run (default: no limit)")
    ap.add_argument("--max-ops", type=int, default=None, help="passed to run_many.py")
    ap.add_argument("--out", type=Path, default=None, help="folder for the chunks' logs (default: a new temp folder)")
    args = ap.parse_args(argv)
    base = args.seed if args.seed is not None else random.randrange(1 << 20)
    todo = chunks(args.n, args.chunk, base)
    out = args.out or Path(tempfile.mkdtemp(prefix="coil-fuzz-"))
    out.mkdir(parents=True, exist_ok=True)
    print(f"fuzz: {args.n} programs in {len(todo)} chunks of up to {args.chunk}, seeds {base}..{base + len(todo) - 1}, "
          f"{args.jobs} at a time; logs in {out}", flush=True)
    start = time.time()
    bad: list[Outcome] = []
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [pool.submit(run_chunk, c, out, args.timeout, args.max_ops) for c in todo]
        for i, future in enumerate(futures):
            o = future.result()
            print(f"[{i + 1}/{len(todo)}] seed {o.chunk.seed} ({o.chunk.size} programs): {o.status} "
                  f"in {o.seconds:.0f}s", flush=True)
            if o.status != "ok":
                bad.append(o)
    print(f"\nfuzz: {len(todo) - len(bad)} of {len(todo)} chunks passed in {time.time() - start:.0f}s")
    for o in bad:
        print("\n" + "=" * 100)
        print(f"seed {o.chunk.seed}: {o.status}; rerun: python {RUN_MANY} {o.chunk.size} --seed {o.chunk.seed} -v"
              f"\nlog: {o.log}\n{o.detail}", end="" if o.detail.endswith("\n") else "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
