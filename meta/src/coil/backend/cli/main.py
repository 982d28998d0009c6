"""The `coil` console script."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    """`coil demo` / `coil bench`: run a real model with backend="coil", or benchmark it."""
    from coil.bench.cli import DESCRIPTION, EPILOG, add_arguments, run_args
    from coil.bench.suite import suite_names

    parser = argparse.ArgumentParser(prog="coil", description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("demo", help="compile and run GPT-2 with backend='coil' (GPU if present, else CPU interpreter)")
    bench = sub.add_parser(
        "bench", help="eager vs torch.compile (Inductor) vs coil, side by side (needs CUDA)",
        formatter_class=argparse.RawDescriptionHelpFormatter, description=DESCRIPTION,
        epilog=EPILOG + "\n\ncases: " + " ".join(suite_names()))
    add_arguments(bench)
    args = parser.parse_args(argv)
    if args.cmd == "demo":
        from coil.backend.cli.demo import run_demo

        return run_demo()
    if args.cmd == "bench":
        return run_args(args, bench)
    return 2


if __name__ == "__main__":
    sys.exit(main())
