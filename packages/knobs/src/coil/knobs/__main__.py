"""``python -m coil.knobs``: list the knobs with their current values, or ``--markdown`` to print
docs/configuration.md (``--markdown --output FILE`` writes it)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from coil.knobs.declarations import KNOBS, knobs
from coil.knobs.markdown import render


def main(argv: list[str] | None = None) -> int:
    """Print the knobs and their values now (an unreadable variable prints its error), or the
    generated configuration document."""
    p = argparse.ArgumentParser(prog="python -m coil.knobs", description=__doc__)
    p.add_argument("--markdown", action="store_true", help="print docs/configuration.md")
    p.add_argument("--output", type=Path, default=None, help="with --markdown: write it to this file")
    args = p.parse_args(argv)
    if args.markdown:
        text = render()
        if args.output is None:
            sys.stdout.write(text)
        else:
            args.output.write_text(text)
        return 0
    for name, knob in KNOBS.items():
        try:
            value: object = getattr(knobs, name)
        except ValueError as e:
            value = f"<{e}>"
        print(f"{name:32} {knob.env or '(override only)':36} {value!r}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
