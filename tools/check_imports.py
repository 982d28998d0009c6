"""Check coil's import rule: a package imports only itself, its declared dependencies and the stdlib.

Reads every `src/` file of each package with `ast`, collects absolute imports, and fails naming the
file, line and module when one is neither stdlib nor declared in that package's pyproject.toml.
Generated wrapper code imports coil.runtime at run time; it lives in strings, not imports, so
wrapper-codegen is checked like any other package.

Inside the `coil` distribution (meta/) it also checks the layering of meta/README.md: each module
belongs to a layer of `LAYERS` and imports only modules of its own layer or lower ones, and the
modules import one another without a cycle. Imports inside functions count like top-level ones
(a lazy import is still a dependency); `LAZY_UPWARD` lists the only upward imports allowed, each
inside a function.
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


# the `coil` distribution's layers, lowest first: a module imports its own layer and lower ones only
LAYERS: tuple[tuple[str, ...], ...] = (
    ("coil.backend.errors", "coil.backend.stats", "coil.backend.config"),
    ("coil.backend.debug",),
    ("coil.backend.caches",),
    ("coil.backend.pipeline",),
    ("coil.backend",),  # the package itself (its __init__): the public API
    ("coil.backend.cli",),
    ("coil.bench",),
)
# (importer, imported) prefixes of the only upward imports allowed, and then only inside a
# function: `coil bench` is a command of the `coil` script, run by coil.bench
LAZY_UPWARD: tuple[tuple[str, str], ...] = (("coil.backend.cli", "coil.bench"),)


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
                out.append(f"{rel}:{getattr(node, 'lineno', 0)}: imports {name!r}, not declared by {own}")
    return out


def _guarded(tree: ast.AST, target: ast.AST) -> bool:
    """An optional extra may only be imported inside a function (lazily, where it is used)."""
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef) and any(n is target for n in ast.walk(fn)):
            return True
    return False


def _module_name(src: Path, path: Path) -> str:
    parts = list(path.relative_to(src).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_imports(src: Path) -> dict[str, list[tuple[str, Path, int, bool]]]:
    """Each module under `src` -> the modules of the same tree it imports: (module, file, line,
    inside a function). `from package import name` names the submodule when `name` is one."""
    files = {_module_name(src, p): p for p in sorted(src.rglob("*.py"))}
    out: dict[str, list[tuple[str, Path, int, bool]]] = {}
    for module, path in files.items():
        tree = ast.parse(path.read_text(), str(path))
        lazy = {id(n) for fn in ast.walk(tree) if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef)
                for n in ast.walk(fn)}
        edges: list[tuple[str, Path, int, bool]] = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in files else node.module
                           for a in node.names]
            else:
                continue
            edges += [(t, path, node.lineno, id(node) in lazy) for t in dict.fromkeys(targets) if t in files]
        out[module] = edges
    return out


def layer_of(module: str) -> int | None:
    """The index in LAYERS of `module`'s layer (its longest listed prefix; "coil.backend" itself
    only for the package's own __init__), or None when it is in none."""
    best: tuple[int, int] | None = None
    for i, prefixes in enumerate(LAYERS):
        for p in prefixes:
            hit = module == p if p == "coil.backend" else module == p or module.startswith(p + ".")
            if hit and (best is None or len(p) > best[0]):
                best = (len(p), i)
    return None if best is None else best[1]


def layering_violations(src: Path) -> list[str]:
    """Upward imports, modules in no layer, and import cycles among the modules under `src`."""
    graph = module_imports(src)
    out: list[str] = []
    for module, edges in sorted(graph.items()):
        mine = layer_of(module)
        if mine is None:
            rel = edges[0][1] if edges else src
            out.append(f"{_rel(rel)}: {module} is in no layer of tools/check_imports.py LAYERS")
            continue
        for target, path, line, lazy in edges:
            theirs = layer_of(target)
            if theirs is None or theirs <= mine:
                continue
            if lazy and any(module.startswith(a) and target.startswith(b) for a, b in LAZY_UPWARD):
                continue
            out.append(f"{_rel(path)}:{line}: {module} imports {target}, a higher layer "
                       f"({', '.join(LAYERS[theirs])} above {', '.join(LAYERS[mine])})")
    for component in import_cycles(graph):
        cycle = _shortest_cycle(graph, component)
        names = " -> ".join([m for m, *_ in cycle] + [cycle[0][0]])
        out += [f"{_rel(path)}:{line}: {module} imports {target}: an import cycle ({names})"
                for module, target, path, line in cycle]
    return out


def _shortest_cycle(graph: dict[str, list[tuple[str, Path, int, bool]]], component: set[str]
                    ) -> list[tuple[str, str, Path, int]]:
    """One shortest cycle through the first module of `component`: its edges (module, target,
    file, line)."""
    start = min(component)
    came: dict[str, tuple[str, str, Path, int]] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w, path, line, _ in graph[v]:
                if w in component and w not in came:
                    came[w] = (v, w, path, line)
                    nxt.append(w)
        if start in came:
            break
        frontier = nxt
    edges = [came[start]]
    while edges[-1][0] != start:
        edges.append(came[edges[-1][0]])
    return edges[::-1]


def import_cycles(graph: dict[str, list[tuple[str, Path, int, bool]]]) -> list[set[str]]:
    """The strongly connected components of more than one module (or a module importing itself)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w, *_ in graph.get(v, []):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                component.add(w)
                if w == v:
                    break
            if len(component) > 1 or any(t == v for t, *_ in graph.get(v, [])):
                cycles.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def _rel(path: Path) -> Path:
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


def main() -> int:
    pkgs = [*sorted((ROOT / "packages").iterdir()), ROOT / "meta"]
    bad = [v for p in pkgs if (p / "pyproject.toml").exists() for v in violations(p)]
    bad += layering_violations(ROOT / "meta" / "src")
    for line in bad:
        print(line)
    print(f"import rule: {len(pkgs)} packages checked, {len(bad)} violations")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
