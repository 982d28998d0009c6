"""The import rule of docs/architecture.md holds: packages import only what they declare."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_import_rule() -> None:
    res = subprocess.run([sys.executable, str(ROOT / "tools" / "check_imports.py")], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "0 violations" in res.stdout


def test_check_catches_an_undeclared_import(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "tools"))
    import check_imports

    pkg = tmp_path / "pkg"
    (pkg / "src" / "coil" / "memory_planner").mkdir(parents=True)
    (pkg / "pyproject.toml").write_text('[project]\nname = "coil-memory-planner"\ndependencies = []\n')
    (pkg / "src" / "coil" / "memory_planner" / "bad.py").write_text("import torch\n")
    check_imports.ROOT = tmp_path
    bad = check_imports.violations(pkg)
    assert len(bad) == 1 and "torch" in bad[0]
