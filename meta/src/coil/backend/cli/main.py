"""The `coil` console script."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    """`coil demo` / `coil bench`: run a real model with backend="coil", or benchmark it."""
    from coil.bench.runner import suite_names

    parser = argparse.ArgumentParser(prog="coil", description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("demo", help="compile and run GPT-2 with backend='coil' (GPU if present, else CPU interpreter)")
    names = suite_names()
    bench = sub.add_parser(
        "bench", help="eager vs torch.compile (Inductor) vs coil, side by side (needs CUDA)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run eager, torch.compile default (TorchInductor) and coil side by side in one process and "
                    "write bench.json and bench.md.",
        epilog="cases: " + " ".join(names) + "\ngroups: all, micro, models, a model name (e.g. gpt2 = "
               "gpt2_infer_bf16 gpt2_train_amp), a micro base name (e.g. softmax = softmax_bf16 softmax_fp32)")
    bench.add_argument("names", nargs="*", metavar="NAMES", help="cases to run (default: all)")
    bench.add_argument("--out", default="bench-out", help="folder for bench.json and bench.md (default: bench-out)")
    bench.add_argument("--budget-s", type=float, default=480.0,
                       help="skip cases that would not finish within this many seconds (default: 480)")
    bench.add_argument("--list", action="store_true", help="print the case names and exit")
    bench.add_argument("--modes", default="eager,inductor,coil",
                       help="comma list of the modes to run (default: eager,inductor,coil)")
    bench.add_argument("--rounds", type=int, default=None,
                       help="micro cases: time the modes in this many interleaved rounds and report each "
                            "mode's median (default: 5)")
    bench.add_argument("--warm-runs", type=int, default=None, metavar="N",
                       help="model cases: run each compiled mode's warm start in N new processes and report "
                            "their median (default: 3)")
    bench.add_argument("--precompile", action="store_true",
                       help="model cases: the cold and the warm first-call processes of every mode run under "
                            "torch's caching precompile (TORCH_CACHING_PRECOMPILE=1; the cold one saves Dynamo's "
                            "package), so that the warm one can skip Dynamo's tracing")
    args = parser.parse_args(argv)
    if args.cmd == "demo":
        from coil.backend.cli.demo import run_demo

        return run_demo()
    if args.cmd == "bench":
        if args.list:
            print("\n".join(names))
            return 0
        from coil.bench.micro import ROUNDS
        from coil.bench.runner import run
        from coil.knobs import knobs

        if args.warm_runs is not None:
            if args.warm_runs < 1:
                bench.error(f"--warm-runs {args.warm_runs}: expected a positive integer")
            knobs.export(bench_warm_runs=args.warm_runs)  # read by each model case's process
        if args.precompile:
            knobs.export(bench_precompile=True)  # read by each model case's process
        return run(args.names, args.out, args.budget_s, [m for m in args.modes.split(",") if m],
                   ROUNDS if args.rounds is None else args.rounds)
    return 2


if __name__ == "__main__":
    sys.exit(main())
