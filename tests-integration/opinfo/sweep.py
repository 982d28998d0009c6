"""The full OpInfo sweep: every OpInfo x dtype x sample of op_db through backend="coil".

    python -m opinfo.sweep [--jobs 2] [--max-samples 3] [--timeout 120] [--ops REGEX] [--resume]
    (from tests-integration/; or `python tests-integration/opinfo/sweep.py`; or `nox -s opinfo`)

Workers are forked from this process after op_db is loaded (no re-import per worker); each runs
one (op, dtype) pair at a time under a SIGALRM time limit, and the parent kills a worker that
overruns by a further minute (recorded as 'timeout') or dies ('crash'). Pairs are ordered dtype
first (float32 across all ops, then the rest) so a partial sweep is still broad.

Writes, as it goes, under results/: sweep.jsonl (one PairResult per line), summary.json and
summary.md (pass counts, native % with the exclusions of harness.excluded_from_native, top
failure reasons, top fallback ops). Exit status 1 when a failing case is not listed in
expected_failures.json. `--write-expected` regenerates that file from the results (reasons are
the observed errors, grouped per (op, dtype); "*" only when all seven dtypes fail alike).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import multiprocessing as mp
import os
import re
import sys
import time
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from opinfo.harness import (
    DTYPES,
    CaseResult,
    PairResult,
    device,
    excluded_from_native,
    expected_for,
    load_expected,
    load_op_db,
    op_key,
    run_pair,
    swept_dtypes,
    use_device,
)

HERE = Path(__file__).resolve().parent
EXPECTED = HERE / "expected_failures.json"
DTYPE_ORDER = ["float32", "int64", "bool", "float16", "bfloat16", "float64", "int32"]

_OPS: dict[str, Any] = {}


def _worker(conn: Connection, where: str, max_samples: int | None, timeout: float) -> None:
    import torch

    use_device(where)
    torch.set_num_threads(1)
    if not _OPS:  # a spawned worker (a CUDA sweep): op_db is loaded here, not inherited
        for op in load_op_db():
            _OPS.setdefault(op_key(op), op)
    while True:
        task = conn.recv()
        if task is None:
            return
        key, dtype = task
        res = run_pair(_OPS[key], dtype, max_samples=max_samples, timeout=timeout)
        conn.send(res.to_json())


class Pool:
    """`jobs` worker processes, one (op, dtype) pair each at a time, with a hard time limit: forked
    from this process after op_db is loaded, or spawned for a CUDA sweep (the parent has
    initialised CUDA, which a forked child cannot use; each spawned worker loads op_db itself)."""

    def __init__(self, jobs: int, max_samples: int | None, timeout: float) -> None:
        self.ctx = mp.get_context("fork" if device() == "cpu" else "spawn")
        self.args = (device(), max_samples, timeout)
        self.hard = timeout + 60
        self.workers: list[dict[str, Any]] = [self._spawn() for _ in range(jobs)]

    def _spawn(self) -> dict[str, Any]:
        parent, child = self.ctx.Pipe()
        p = self.ctx.Process(target=_worker, args=(child, *self.args), daemon=True)
        p.start()
        child.close()
        return {"proc": p, "conn": parent, "task": None, "since": 0.0}

    def run(self, tasks: list[tuple[str, str]], on_result: Any) -> None:
        todo = list(reversed(tasks))
        while todo or any(w["task"] for w in self.workers):
            for w in self.workers:
                if w["task"] is None and todo:
                    w["task"] = todo.pop()
                    w["since"] = time.monotonic()
                    w["conn"].send(w["task"])
            busy = [w for w in self.workers if w["task"]]
            ready = wait([w["conn"] for w in busy], timeout=5)
            now = time.monotonic()
            for i, w in enumerate(self.workers):
                if not w["task"]:
                    continue
                key, dtype = w["task"]
                if w["conn"] in ready:
                    try:
                        on_result(PairResult.from_json(w["conn"].recv()))
                        w["task"] = None
                        continue
                    except (EOFError, OSError):
                        code = w["proc"].exitcode
                        res = _failed(key, dtype, "crash", f"crash: worker died (exit code {code})")
                elif now - w["since"] > self.hard:
                    res = _failed(key, dtype, "timeout", f"timeout: (op, dtype) ran past {self.hard:.0f} s (killed)")
                else:
                    continue
                w["proc"].kill()
                w["proc"].join()
                on_result(res)
                self.workers[i] = self._spawn()

    def close(self) -> None:
        for w in self.workers:
            with contextlib.suppress(OSError):
                w["conn"].send(None)
            w["proc"].join(timeout=10)
            if w["proc"].is_alive():
                w["proc"].kill()


def _failed(key: str, dtype: str, category: str, reason: str) -> PairResult:
    return PairResult(key, dtype, [CaseResult(key, dtype, 0, False, category, reason)], False, [category])


# --- summaries ----------------------------------------------------------------------------------

def _group(c: CaseResult) -> str:
    """A failure's reason for grouping: which graph (forward/backward/inference) is left out."""
    return f"[{c.category}] " + re.sub(r"compiling (forward|backward|inference)_N", "compiling a graph", c.reason)


def summarise(results: list[PairResult], meta: dict[str, Any]) -> dict[str, Any]:
    expected = load_expected(EXPECTED) if EXPECTED.exists() else {}
    cases = [c for r in results for c in r.cases]
    failed = [c for c in cases if not c.passed]
    unexpected = [c for c in failed if expected_for(expected, c.op, c.dtype) is None]
    counted = [r for r in results if excluded_from_native(r.op) is None]
    reasons = collections.Counter(_group(c) for c in failed)
    reason_ops: dict[str, set[str]] = collections.defaultdict(set)
    for c in failed:
        reason_ops[_group(c)].add(c.op)
    not_native = collections.Counter(w for r in counted for w in r.not_native)
    by_dtype: dict[str, dict[str, int]] = {}
    for d in DTYPES:
        rs = [r for r in results if r.dtype == d]
        cs = [c for r in rs for c in r.cases]
        by_dtype[d] = {"pairs": len(rs), "cases": len(cs), "passed": sum(c.passed for c in cs),
                       "native_pairs": sum(r.native for r in rs if excluded_from_native(r.op) is None),
                       "counted_pairs": sum(1 for r in rs if excluded_from_native(r.op) is None)}

    def pct(a: int, b: int) -> float:
        return round(100.0 * a / b, 2) if b else 0.0

    return {
        **meta,
        "opinfos_in_op_db": meta.get("opinfos_in_op_db"),
        "opinfos_swept": len({r.op for r in results}),
        "pairs": len(results),
        "cases": len(cases),
        "cases_passed": len(cases) - len(failed),
        "pass_pct": pct(len(cases) - len(failed), len(cases)),
        "cases_failed": len(failed),
        "cases_failed_unexpected": len(unexpected),
        "pairs_counted_for_native": len(counted),
        "pairs_native": sum(r.native for r in counted),
        "native_pct": pct(sum(r.native for r in counted), len(counted)),
        "native_pct_all_pairs": pct(sum(r.native for r in results), len(results)),
        "by_dtype": by_dtype,
        "failure_categories": dict(collections.Counter(c.category for c in failed).most_common()),
        # cases that pass by a rule other than closeness to eager (harness docstring)
        "passed_categories": dict(collections.Counter(c.category for c in cases if c.passed and c.category)
                                  .most_common()),
        "top_failure_reasons": [{"reason": r, "cases": n, "ops": len(reason_ops[r]),
                                 "example_ops": sorted(reason_ops[r])[:8]} for r, n in reasons.most_common(40)],
        "top_not_native_reasons": [{"reason": r, "pairs": n} for r, n in not_native.most_common(40)],
        "unexpected_failures": sorted({f"{c.op} [{c.dtype}]: [{c.category}] {c.reason}" for c in unexpected})[:500],
    }


def write_markdown(s: dict[str, Any], path: Path) -> None:
    lines = [
        "# OpInfo sweep: backend=\"coil\" vs eager ("
        + ("CPU, Triton interpreter" if device() == "cpu" else device()) + ")", "",
        f"- coil: {s.get('coil_source')}; torch {s.get('torch')}, triton {s.get('triton')}; {s.get('date')}",
        f"- settings: max {s.get('max_samples')} samples per (op, dtype), timeout {s.get('timeout')} s, "
        f"{s.get('jobs')} processes; {'complete' if s.get('complete') else 'PARTIAL'}"
        f" ({s['pairs']} of {s.get('pairs_planned')} planned (op, dtype) pairs; op_db has "
        f"{s.get('pairs_in_op_db')} at the swept dtypes)",
        f"- OpInfos in op_db: {s['opinfos_in_op_db']}; swept: {s['opinfos_swept']}",
        f"- (op, dtype, sample) cases: {s['cases']}; passed {s['cases_passed']} ({s['pass_pct']} %); "
        f"failed {s['cases_failed']}, of which not in expected_failures.json: {s['cases_failed_unexpected']}",
        f"- fully native (op, dtype) pairs: {s['pairs_native']} / {s['pairs_counted_for_native']} = "
        f"**{s['native_pct']} %** (excluding linalg/fft/sparse and matmul/conv/sort ops; "
        f"{s['native_pct_all_pairs']} % over all pairs)", "",
        "| dtype | pairs | cases | passed | native / counted |", "|---|---|---|---|---|",
    ]
    for d, v in s["by_dtype"].items():
        if v["pairs"]:
            lines.append(f"| {d} | {v['pairs']} | {v['cases']} | {v['passed']} | "
                         f"{v['native_pairs']} / {v['counted_pairs']} |")
    lines += ["", "## Failure categories (cases)", ""]
    lines += [f"- {k}: {v}" for k, v in s["failure_categories"].items()] or ["- none"]
    lines += ["", "## Passed by another rule than closeness to eager (cases)", ""]
    lines += ["- rejected-by-both: eager and coil both raise on the sample",
              "- closer-to-fp64: float16/bfloat16, no further from the float64 reference than eager "
              "(opinfo/fp64_reference.py)", ""]
    lines += [f"- {k}: {v}" for k, v in s.get("passed_categories", {}).items()] or ["- none"]
    lines += ["", "## Top failure reasons", "", "| cases | ops | reason | example ops |", "|---|---|---|---|"]
    for r in s["top_failure_reasons"][:25]:
        reason = r["reason"].replace("|", "\\|")
        lines.append(f"| {r['cases']} | {r['ops']} | {reason} | {', '.join(r['example_ops'])} |")
    lines += ["", "## Why (op, dtype) pairs are not native (counted pairs)", "", "| pairs | reason |", "|---|---|"]
    for r in s["top_not_native_reasons"][:30]:
        lines.append(f"| {r['pairs']} | {r['reason'].replace('|', '/')} |")
    path.write_text("\n".join(lines) + "\n")


# --- expected failures file -----------------------------------------------------------------------

def write_expected(results: list[PairResult], path: Path) -> int:
    """expected_failures.json from observed failures: one entry per (op, dtype), or (op, "*") when
    all seven dtypes were swept and failed with the same reasons (never for unobserved dtypes)."""
    per_pair: dict[tuple[str, str], list[str]] = {}
    dtypes_swept: dict[str, set[str]] = collections.defaultdict(set)
    for r in results:
        dtypes_swept[r.op].add(r.dtype)
        reasons = sorted({f"[{c.category}] {c.reason}" for c in r.cases if not c.passed})
        if reasons:
            per_pair[(r.op, r.dtype)] = reasons
    entries = []
    for op in sorted(dtypes_swept):
        pairs = {d: per_pair[(op, d)] for d in DTYPES if (op, d) in per_pair}
        if not pairs:
            continue
        distinct = {tuple(v) for v in pairs.values()}
        if set(pairs) == set(DTYPES) and len(distinct) == 1:  # "*" only where every dtype was seen failing
            entries.append({"op": op, "dtype": "*", "reason": "; ".join(next(iter(distinct)))})
        else:
            entries += [{"op": op, "dtype": d, "reason": "; ".join(v)} for d, v in pairs.items()]
    doc = {
        "_comment": "Expected failures of the OpInfo harness: (op, dtype or '*') -> the observed reason. "
                    "Generated by `python -m opinfo.sweep --write-expected` from a sweep; a failing case "
                    "not listed here fails the sweep and tests-integration/opinfo/test_opinfo_sample.py. "
                    "Remove an entry when its lowering is fixed.",
        "expected_failures": entries,
    }
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return len(entries)


# --- main -----------------------------------------------------------------------------------------

def _meta(args: argparse.Namespace, n_ops: int, planned: int, in_db: int) -> dict[str, Any]:
    import coil.backend
    import torch
    import triton

    return {"torch": torch.__version__, "triton": triton.__version__,
            "coil_source": str(Path(coil.backend.__file__).parent), "date": time.strftime("%Y-%m-%d %H:%M"),
            "max_samples": args.max_samples, "timeout": args.timeout, "jobs": args.jobs,
            "opinfos_in_op_db": n_ops, "pairs_planned": planned, "pairs_in_op_db": in_db}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    p.add_argument("--max-samples", type=int, default=3, help="samples per (op, dtype); 0: all")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per (op, dtype)")
    p.add_argument("--ops", default=None, help="regex over op keys (name or name.variant)")
    p.add_argument("--dtypes", default=",".join(DTYPE_ORDER))
    p.add_argument("--device", default="cpu", help="where samples are made and compiled: cpu (Triton's "
                   "interpreter) or cuda (workers are spawned, not forked)")
    p.add_argument("--sample", action="store_true", help="only the (op, dtype) pairs of test_opinfo_sample.SAMPLE")
    p.add_argument("--out", type=Path, default=HERE / "results")
    p.add_argument("--resume", action="store_true", help="keep results already in OUT/sweep.jsonl")
    p.add_argument("--write-expected", action="store_true",
                   help="only (re)generate expected_failures.json from OUT/sweep.jsonl")
    p.add_argument("--summarise", action="store_true",
                   help="only rewrite OUT/summary.{json,md} from OUT/sweep.jsonl (current exclusions and expected failures)")
    args = p.parse_args(argv)
    use_device(args.device)
    args.out.mkdir(parents=True, exist_ok=True)
    jsonl = args.out / "sweep.jsonl"

    if args.summarise:
        results = [PairResult.from_json(json.loads(ln)) for ln in jsonl.read_text().splitlines() if ln]
        old = json.loads((args.out / "summary.json").read_text()) if (args.out / "summary.json").exists() else {}
        keep = ("torch", "triton", "coil_source", "date", "max_samples", "timeout", "jobs", "opinfos_in_op_db",
                "pairs_planned", "pairs_in_op_db", "complete", "elapsed_s")
        s = summarise(results, {k: old.get(k) for k in keep})
        (args.out / "summary.json").write_text(json.dumps(s, indent=1) + "\n")
        write_markdown(s, args.out / "summary.md")
        print((args.out / "summary.md").read_text())
        return 0

    if args.write_expected:
        results = [PairResult.from_json(json.loads(ln)) for ln in jsonl.read_text().splitlines() if ln]
        n = write_expected(results, EXPECTED)
        print(f"wrote {n} entries to {EXPECTED}")
        return 0

    t0 = time.monotonic()
    ops = load_op_db()
    print(f"op_db: {len(ops)} OpInfos ({time.monotonic() - t0:.0f} s to import)", flush=True)
    pattern = re.compile(args.ops) if args.ops else None
    for op in ops:
        key = op_key(op)
        if pattern is None or pattern.search(key):
            _OPS.setdefault(key, op)
    wanted = [d for d in args.dtypes.split(",") if d]
    tasks = [(k, d) for d in wanted for k, op in _OPS.items() if d in swept_dtypes(op)]
    if args.sample:
        from opinfo.test_opinfo_sample import SAMPLE

        tasks = [t for t in SAMPLE if t in set(tasks)]

    results: list[PairResult] = []
    if args.resume and jsonl.exists():
        results = [PairResult.from_json(json.loads(ln)) for ln in jsonl.read_text().splitlines() if ln]
        done = {(r.op, r.dtype) for r in results}
        tasks = [t for t in tasks if t not in done]
    elif jsonl.exists():
        jsonl.unlink()
    in_db = len({(op_key(op), d) for op in ops for d in swept_dtypes(op) if d in wanted})
    meta = _meta(args, len(ops), len(tasks) + len(results), in_db)
    print(f"{len(tasks)} (op, dtype) pairs to run with {args.jobs} processes", flush=True)

    last = [time.monotonic()]

    def flush(final: bool = False) -> dict[str, Any]:
        s = summarise(results, {**meta, "complete": final, "elapsed_s": round(time.monotonic() - t0)})
        (args.out / "summary.json").write_text(json.dumps(s, indent=1) + "\n")
        write_markdown(s, args.out / "summary.md")
        last[0] = time.monotonic()
        return s

    with jsonl.open("a") as f:
        def on_result(r: PairResult) -> None:
            results.append(r)
            f.write(json.dumps(r.to_json()) + "\n")
            f.flush()
            bad = sum(not c.passed for c in r.cases)
            print(f"[{len(results)}/{meta['pairs_planned']}] {r.op} {r.dtype}: {len(r.cases) - bad}/{len(r.cases)} "
                  f"pass, {'native' if r.native else 'not native'} ({r.seconds:.1f} s)", flush=True)
            if time.monotonic() - last[0] > 60:
                flush()

        pool = Pool(args.jobs, args.max_samples or None, args.timeout)
        try:
            pool.run(tasks, on_result)
        finally:
            pool.close()
    s = flush(final=True)
    print((args.out / "summary.md").read_text())
    return 1 if s["cases_failed_unexpected"] else 0


if __name__ == "__main__":
    sys.exit(main())
