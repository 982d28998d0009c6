"""Check coil's import rule: a package imports only itself, its declared dependencies and the stdlib.

Reads every `src/` file of each package with `ast`, collects absolute imports, and fails naming the
file, line and module when one is neither stdlib nor declared in that package's pyproject.toml.
Generated wrapper code imports coil.runtime at run time; it lives in strings, not imports, so
wrapper-codegen is checked like any other package.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# distribution name -> top-level import names it provides
PROVIDES = {
    "torch": {"torch"},
    "triton": {"triton"},
    "sympy": {"sympy"},
    "matplotlib": {"matplotlib"},
    "numpy": {"numpy"},
    "transformers": {"transformers"},
}


def coil_import(dist: str) -> str:
    return "coil." + dist.removeprefix("coil-").replace("-", "_")


def declared(pyproject: Path) -> tuple[str, set[str], set[str]]:
    """(own import name, allowed import roots, optional-extra roots) of one package."""
    data = tomllib.loads(pyproject.read_text())["project"]
    own = "coil.backend" if data["name"] == "coil" else coil_import(data["name"])
    allowed: set[str] = {own}
    if data["name"] == "coil":
        allowed.add("coil.bench")  # the `coil` distribution ships the backend and its bench harness
    for req in data.get("dependencies", []):
        name = re.split(r"[<>=!~ \[;]", req, maxsplit=1)[0]
        allowed |= {coil_import(name)} if name.startswith("coil-") else PROVIDES.get(name, {name})
    optional: set[str] = set()
    for reqs in data.get("optional-dependencies", {}).values():
        for req in reqs:
            name = re.split(r"[<>=!~ \[;]", req, maxsplit=1)[0]
            optional |= PROVIDES.get(name, {name})
    return own, allowed, optional


def violations(pkg_dir: Path) -> list[str]:
    own, allowed, optional = declared(pkg_dir / "pyproject.toml")
    out: list[str] = []
    for path in sorted((pkg_dir / "src").rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                root = name.split(".")[0]
                if root in sys.stdlib_module_names or root == "__future__":
                    continue
                key = ".".join(name.split(".")[:2]) if root == "coil" else root
                if key in allowed:
                    continue
                if key in optional and _guarded(tree, node):
                    continue
                rel = path.relative_to(ROOT)
                out.append(f"{rel}:{node.lineno}: imports {name!r}, not declared by {own}")
    return out


def _guarded(tree: ast.AST, target: ast.AST) -> bool:
    """An optional extra may only be imported inside a function (lazily, where it is used)."""
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef) and any(n is target for n in ast.walk(fn)):
            return True
    return False


def main() -> int:
    pkgs = [*sorted((ROOT / "packages").iterdir()), ROOT / "meta"]
    bad = [v for p in pkgs if (p / "pyproject.toml").exists() for v in violations(p)]
    for line in bad:
        print(line)
    print(f"import rule: {len(pkgs)} packages checked, {len(bad)} violations")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
