"""The `coil` console script."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    """`coil demo`: compile and run a real model with backend="coil" and report."""
    parser = argparse.ArgumentParser(prog="coil", description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("demo", help="compile and run GPT-2 with backend='coil' (GPU if present, else CPU interpreter)")
    args = parser.parse_args(argv)
    if args.cmd == "demo":
        from coil.backend.demo import run_demo

        return run_demo()
    return 2


if __name__ == "__main__":
    sys.exit(main())
