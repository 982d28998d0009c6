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


def test_check_catches_an_upward_import_and_a_cycle_in_the_coil_distribution(tmp_path: Path) -> None:
    """meta/'s layering: an upward import fails even inside a function, the CLI's lazy import of
    coil.bench passes, and two modules of one layer importing each other fail as a cycle."""
    sys.path.insert(0, str(ROOT / "tools"))
    import check_imports

    files = {
        "coil/backend/__init__.py": "",
        "coil/backend/caches/__init__.py": "",
        "coil/backend/caches/store.py": "def load():\n    from coil.backend.pipeline.run import go\n",
        "coil/backend/pipeline/__init__.py": "",
        "coil/backend/pipeline/run.py": "from coil.backend.caches import store\n",
        "coil/backend/cli/__init__.py": "",
        "coil/backend/cli/main.py": "def main():\n    from coil.bench import runner\n",
        "coil/bench/__init__.py": "",
        "coil/bench/runner.py": "from coil.bench import models\n",
        "coil/bench/models.py": "def f():\n    from coil.bench.runner import g\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    bad = check_imports.layering_violations(tmp_path)
    upward = [b for b in bad if "a higher layer" in b]
    assert len(upward) == 1 and "store.py:2: coil.backend.caches.store imports coil.backend.pipeline.run" in upward[0]
    cycles = sorted(b for b in bad if "import cycle" in b)
    assert len(cycles) == 4, bad  # store <-> run, models <-> runner: each edge named with its line
    assert any("models.py:2: coil.bench.models imports coil.bench.runner" in b for b in cycles)
    assert not any("cli" in b for b in bad)
