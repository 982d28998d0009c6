"""Run N fuzzed programs through coil and print each distinct failure with a minimal reproducer.

    .venv/bin/python tests-integration/fuzz/run_many.py N [--seed S] [--max-ops K] [--dynamic]

Exit status 1 when any program mismatched or crashed. Each failure is reduced (drop outputs, pick
the earliest failing intermediate as the output, drop dead ops, make inputs contiguous) and printed
as the program's DSL text, which is a runnable Python script.
"""

from __future__ import annotations

import argparse
import dataclasses
import faulthandler
import sys
import time
import traceback
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from coil.knobs import knobs
from hypothesis import HealthCheck, Phase, given, seed, settings

from fuzz.harness import check
from fuzz.programs import Input, Program, programs

knobs.export_default(verify=True)  # the fx-passes verifier after every pass, unless the caller set COIL_VERIFY


def outcome(prog: Program) -> str | None:
    """None when coil matches eager, else a short signature of the failure."""
    try:
        check(prog)
    except AssertionError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else "AssertionError"
        kind = "mismatch"
        if "dtype" in first:
            kind = "dtype mismatch"
        elif "shape" in first:
            kind = "shape mismatch"
        return f"{kind}: {first[:160]}"
    except Exception as e:
        msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
        return f"crash: {type(e).__name__}: {msg[:200]}"
    return None


def _kind(sig: str) -> str:
    return sig.split(":")[0]


def reduce(prog: Program, sig: str) -> Program:
    """Greedy reduction keeping the same failure kind."""
    kind = _kind(sig)

    def fails(p: Program) -> bool:
        s = outcome(p)
        return s is not None and _kind(s) == kind

    best = prog.live()
    # 1. one output only, earliest failing value first.
    n_in = len(best.inputs)
    for v in range(n_in, n_in + len(best.ops)):
        cand = dataclasses.replace(best, outputs=[v]).live()
        if fails(cand):
            best = cand
            break
    else:
        for o in best.outputs:
            cand = dataclasses.replace(best, outputs=[o]).live()
            if fails(cand):
                best = cand
                break
    # 2. contiguous inputs where the failure does not need the layout.
    for i, spec in enumerate(best.inputs):
        if spec.layout != "contiguous":
            inputs = list(best.inputs)
            inputs[i] = Input(spec.shape, spec.dtype)
            cand = dataclasses.replace(best, inputs=inputs)
            if fails(cand):
                best = cand
    # 3. another seed with nicer values is not tried: values come from the seed and are small.
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("n", type=int, help="number of programs")
    ap.add_argument("--seed", type=int, default=None, help="hypothesis seed (default: random)")
    ap.add_argument("--max-ops", type=int, default=8)
    ap.add_argument("--no-reduce", action="store_true")
    ap.add_argument("--dynamic", action="store_true", help="every program in dynamic mode (dynamic=True)")
    ap.add_argument("--current", default=None,
                    help="write each program to this file before running it (find a segfault's program)")
    ap.add_argument("-v", "--verbose", action="store_true", help="print each failing program at once")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    faulthandler.enable()

    failures: dict[str, list[Program]] = {}
    count = 0
    start = time.time()

    @settings(max_examples=args.n, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(programs(max_ops=args.max_ops, dynamic=args.dynamic))
    def run(prog: Program) -> None:
        nonlocal count
        count += 1
        if args.current:  # survives a hard crash (segfault) of the process
            Path(args.current).write_text(prog.live().source() + "\n")
        sig = outcome(prog)
        if sig is not None:
            failures.setdefault(sig, []).append(prog)
            print(f"[{count}] {sig}", flush=True)
            if args.verbose:
                print(prog.live().source(), flush=True)
        if count % 50 == 0:
            print(f"... {count} programs, {sum(map(len, failures.values()))} failures, "
                  f"{time.time() - start:.0f}s", flush=True)

    if args.seed is not None:
        run = seed(args.seed)(run)
    try:
        run()
    except Exception:
        traceback.print_exc()
    print(f"\n{count} programs in {time.time() - start:.0f}s; "
          f"{sum(map(len, failures.values()))} failures, {len(failures)} distinct")
    for sig, progs in failures.items():
        smallest = min(progs, key=lambda p: (len(p.live().ops), len(p.inputs)))
        print("\n" + "=" * 100)
        print(f"{sig}   ({len(progs)} programs)")
        if not args.no_reduce:
            smallest = reduce(smallest, sig)
        print(smallest.source())
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
