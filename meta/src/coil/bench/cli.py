"""The command line of `coil bench`: its arguments and what runs them.

`add_arguments(parser)` declares them on an argparse parser and `run_args(args, parser)` runs
a parsed command line: `--list` prints the cases (those the names select, or every case),
`--merge DIR...` joins runs made in parallel (coil.bench.merge), otherwise `coil.bench.runner.run`. `main(argv)` is `python -m coil.bench`, the same command on
its own.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from coil.bench.measure import ALL_MODES, MODES
from coil.bench.merge import merge_dirs
from coil.bench.micro import ROUNDS
from coil.bench.model_runs import CaseSettings
from coil.bench.runner import run
from coil.bench.suite import select, suite_names
from coil.knobs import knobs

DESCRIPTION = ("Run eager, torch.compile (TorchInductor: default, reduce-overhead, max-autotune; FlexAttention) "
               "and coil (with and without CUDA graphs) side by side, one model case a process, and write "
               "bench.json and bench.md.")
EPILOG = ("names: a case, a micro op (softmax), an attention form (attn_causal), a model (gpt2, zoo_llama, "
          "llama), a group (all, micro, gemm, attention, models, zoo, zoo-decoder, zoo-encoder, zoo-encdec, "
          "zoo-vision) or a family (gpt-neox, swin); "
          "NAME:infer, NAME:train, NAME:accum or NAME:opt keeps one step kind (zoo-vision:infer). Default: micro models. "
          "`--list NAMES` prints what they select.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare `coil bench`'s arguments on `parser`."""
    parser.add_argument("names", nargs="*", metavar="NAMES", help="cases or groups to run (default: micro models)")
    parser.add_argument("--out", default="bench-out", help="folder for bench.json and bench.md (default: bench-out)")
    parser.add_argument("--budget-s", type=float, default=480.0,
                        help="skip cases that would not finish within this many seconds in all (default: 480)")
    parser.add_argument("--case-budget-s", type=float, default=None, metavar="S",
                        help="model cases: stop a case after S seconds; the modes it finished keep their figures")
    parser.add_argument("--list", action="store_true", help="print the cases NAMES select (default: every case) and exit")
    parser.add_argument("--modes", default=None,
                        help=f"comma list of the modes to run, of {','.join(ALL_MODES)} (inductor_max, coil_max: "
                             "torch.compile(mode='max-autotune-no-cudagraphs') with Inductor, with coil; flex: the "
                             "attention cases' FlexAttention form compiled by Inductor, attention cases only; default: "
                             f"{','.join(MODES)}, plus inductor_max and coil_max on gemm cases and flex on attention "
                             "cases)"),
    parser.add_argument("--rounds", type=int, default=None,
                        help=f"micro cases: time the modes in this many interleaved rounds and report each "
                             f"mode's median (default: {ROUNDS})")
    parser.add_argument("--warm-runs", type=int, default=None, metavar="N",
                        help="model cases: run each compiled mode's warm start in N new processes and report "
                             "their median; 0 for none (default: 3)")
    parser.add_argument("--quick", action="store_true",
                        help="model cases: start no first-call processes: the bench's process compiles each mode "
                             "on empty caches and times that first call; no warm starts")
    parser.add_argument("--mode-processes", action="store_true",
                        help="model cases: run each mode in a case process of its own (build, reference, compile, "
                             "timing), so that no mode is timed or compiled after another in one process")
    parser.add_argument("--loop-steps", type=int, default=20, metavar="N",
                        help="model cases: steps of the wall-clock loop (default: 20)")
    parser.add_argument("--lane-lock", default=None, metavar="PATH",
                        help="model cases: a lock file every lane of this machine shares (one `coil bench` a "
                             "GPU): a lane times its steps only while no other lane compiles or times "
                             "(coil.bench.lanes)")
    parser.add_argument("--merge", nargs="+", metavar="DIR", default=None,
                        help="measure nothing: join the bench.json of runs over disjoint cases (one a GPU) into "
                             "--out's bench.json and bench.md, the cases in the order NAMES select")
    parser.add_argument("--precompile", action="store_true",
                        help="model cases: the cold and the warm first-call processes of every mode run under "
                             "torch's caching precompile (TORCH_CACHING_PRECOMPILE=1; the cold one saves Dynamo's "
                             "package), so that the warm one can skip Dynamo's tracing")


def run_args(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Run a command line `add_arguments` parsed; `parser.error` (exit 2) for a bad value."""
    if args.list:
        try:
            print("\n".join(select(args.names) if args.names else suite_names()))
        except ValueError as exc:
            parser.error(str(exc))
        return 0
    if args.merge:
        try:
            merge_dirs(args.merge, args.out, select(args.names) if args.names else ())
        except ValueError as exc:
            parser.error(str(exc))
        print((Path(args.out) / "bench.md").read_text())
        return 0
    if args.warm_runs is not None and args.warm_runs < 0:
        parser.error(f"--warm-runs {args.warm_runs}: expected 0 or more")
    if args.loop_steps < 1:
        parser.error(f"--loop-steps {args.loop_steps}: expected a positive integer")
    if args.lane_lock is not None and not Path(args.lane_lock).parent.is_dir():
        parser.error(f"--lane-lock {args.lane_lock}: its folder does not exist")
    if args.warm_runs:
        knobs.export(bench_warm_runs=args.warm_runs)  # the default of every case process
    if args.precompile:
        knobs.export(bench_precompile=True)  # read by each model case's process
    settings = CaseSettings(warm_runs=args.warm_runs, quick=args.quick, loop_steps=args.loop_steps,
                            lane_lock=args.lane_lock, mode_processes=args.mode_processes)
    modes = None if args.modes is None else [m for m in args.modes.split(",") if m]
    return run(args.names, args.out, args.budget_s, modes,
               ROUNDS if args.rounds is None else args.rounds, settings, args.case_budget_s)


def main(argv: list[str] | None = None) -> int:
    """`python -m coil.bench [NAMES ...] [options]`: `coil bench` on its own."""
    parser = argparse.ArgumentParser(prog="python -m coil.bench", description=DESCRIPTION, epilog=EPILOG)
    add_arguments(parser)
    return run_args(parser.parse_args(argv), parser)


if __name__ == "__main__":
    sys.exit(main())
