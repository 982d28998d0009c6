"""Check that docs/configuration.md is what the knob registry generates (`--write`: regenerate it).

The registry, coil.knobs, is standard library only: it is imported from packages/knobs/src by
path, so this runs where nothing of coil is installed (nox's lint session has only ruff).
"""

from __future__ import annotations

import difflib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "configuration.md"
sys.path.insert(0, str(ROOT / "packages" / "knobs" / "src"))

from coil.knobs.markdown import render  # noqa: E402


def main(argv: list[str]) -> int:
    want = render()
    if "--write" in argv:
        DOC.write_text(want)
        print(f"wrote {DOC.relative_to(ROOT)}")
        return 0
    have = DOC.read_text() if DOC.exists() else ""
    if have == want:
        print("docs/configuration.md matches the knob registry")
        return 0
    diff = difflib.unified_diff(have.splitlines(), want.splitlines(), "docs/configuration.md",
                                "python -m coil.knobs --markdown", lineterm="")
    print("\n".join(diff))
    print("docs/configuration.md differs from the knob registry: run "
          "`python tools/check_config_doc.py --write` (or `python -m coil.knobs --markdown`)")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
