"""Check the tree's house rules (run by `nox -s lint`, so by CI).

1. The tree describes coil as it is: no text refers to numbered rounds of past work (the word
   session or issue followed by a number, numbered gpu_session scripts), and only docs/perf.md, whose tables must say when and where each figure
   was measured, and the OpInfo sweep's generated results, which stamp their run, carry dates.
2. Small files and functions: no Python file over MAX_FILE_LINES lines, no function over
   MAX_FUNCTION_LINES (classes may be longer: their methods are counted one by one).
3. One knob registry: `os.environ`, `os.getenv` and `os.putenv` appear only in ENVIRON_FILES.
4. A caught error is not kept (package sources): an `except ... as NAME` handler does not return,
   yield, assign or put into a container NAME itself (a call of it, `str(NAME)` or
   `without_frames(NAME)`, or an f-string is fine). A kept error's traceback holds every frame up
   to the user's, and with them what those frames held when they returned.

Fails naming the file, line and rule of each violation. Stdlib only: runs before anything is
installed.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_FILE_LINES = 800
MAX_FUNCTION_LINES = 120
# The registry reads the environment for every knob and writes it for child processes and Triton.
ENVIRON_FILES = frozenset({"packages/knobs/src/coil/knobs/registry.py"})
DATED = ("docs/perf.md", "tests-integration/opinfo/results/")
SKIPPED = frozenset({"uv.lock", "tools/check_tree.py"})
KEPT_ERROR_SCOPE = ("packages/", "meta/src/")
STORING = frozenset({"append", "add", "extend", "insert", "setdefault", "put", "put_nowait", "set_exception"})

HISTORY = re.compile(r"\bsessions? ?\d+|\bgpu_session|\bsession\d+[a-z]?\b|\bissues? ?[-#]?\d+\b",
                     re.IGNORECASE)
DATE = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b")
ENVIRON = re.compile(r"\bos\.(?:environ|getenv|putenv)\b|\bfrom os import [^\n]*\b(?:environ|getenv|putenv)\b")
TEXT_SUFFIXES = frozenset({".py", ".md", ".sh", ".toml", ".txt", ".cfg", ".ini", ".yml", ".yaml", ".json", ""})


def tracked() -> list[str]:
    """The repository's tracked files, relative to ROOT."""
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, check=True, capture_output=True, text=True).stdout
    return [f for f in out.splitlines() if f not in SKIPPED and (ROOT / f).is_file()]


def history_words(path: str, text: str) -> list[str]:
    """Lines naming past rounds of work, or dated outside DATED."""
    bad = []
    for no, line in enumerate(text.splitlines(), 1):
        if HISTORY.search(line):
            bad.append(f"{path}:{no}: names a past round of work: {line.strip()[:90]}")
        elif not path.startswith(DATED) and DATE.search(line):
            bad.append(f"{path}:{no}: a date outside docs/perf.md: {line.strip()[:90]}")
    return bad


def sizes(path: str, text: str, tree: ast.Module) -> list[str]:
    """A Python file over MAX_FILE_LINES, or functions over MAX_FUNCTION_LINES."""
    bad = []
    lines = text.count("\n")
    if lines > MAX_FILE_LINES:
        bad.append(f"{path}: {lines} lines (at most {MAX_FILE_LINES})")
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > MAX_FUNCTION_LINES:
                bad.append(f"{path}:{node.lineno}: function {node.name} is {length} lines "
                           f"(at most {MAX_FUNCTION_LINES})")
    return bad


def environ_reads(path: str, text: str) -> list[str]:
    """Environment access outside the knob registry (ENVIRON_FILES)."""
    if path in ENVIRON_FILES:
        return []
    return [f"{path}:{no}: reads the environment outside the knob registry (coil.knobs)"
            for no, line in enumerate(text.splitlines(), 1) if ENVIRON.search(line)]


def _bare(value: ast.AST, name: str) -> bool:
    """Whether `value` holds the object `name` itself: reached without passing through a call,
    an attribute or an f-string."""
    if isinstance(value, ast.Name):
        return value.id == name
    if isinstance(value, ast.Call | ast.Attribute | ast.JoinedStr | ast.Lambda):
        return False
    return any(_bare(child, name) for child in ast.iter_child_nodes(value))


def kept_errors(path: str, tree: ast.Module) -> list[str]:
    """Rule 4: caught errors returned, yielded, assigned or stored, in package sources."""
    if not path.startswith(KEPT_ERROR_SCOPE) or "/src/" not in path:
        return []
    bad = []
    for handler in ast.walk(tree):
        if not isinstance(handler, ast.ExceptHandler) or not handler.name:
            continue
        for node in (n for stmt in handler.body for n in ast.walk(stmt)):
            if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign | ast.NamedExpr | ast.Return | ast.Yield):
                values = [node.value] if node.value is not None else []
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in STORING:
                values = list(node.args)
            else:
                continue
            if any(_bare(v, handler.name) for v in values):
                bad.append(f"{path}:{node.lineno}: keeps the caught error {handler.name!r} (its traceback "
                           "holds the callers' frames): keep str() of it, or without_frames() of it")
    return bad


def main() -> int:
    bad: list[str] = []
    for path in tracked():
        if Path(path).suffix not in TEXT_SUFFIXES:
            continue
        try:
            text = (ROOT / path).read_text()
        except UnicodeDecodeError:
            continue
        bad += history_words(path, text)
        if path.endswith(".py"):
            tree = ast.parse(text, path)
            bad += sizes(path, text, tree) + environ_reads(path, text) + kept_errors(path, tree)
    for line in bad:
        print(line)
    print(f"tree rules: {len(bad)} violations")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
