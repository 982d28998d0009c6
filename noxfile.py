"""coil's task runner: `nox` runs everything CI needs.

Sessions:
  tests(package=...)  each package's own tests, in an environment holding only that package and
                      its declared dependencies (so an undeclared sibling import fails)
  integration         tests-integration/: end to end through torch.compile(backend="coil");
                      on the GPU when torch.cuda is available, else the Triton interpreter on CPU
                      (with matplotlib, through coil-memory-planner[plot]: debug dirs hold a PNG);
                      of the model zoo's CPU twin, only its CI subset (tests-integration/zoo);
                      not the tests marked `slow`
  slow                tests-integration's long cases (marked `slow`: the zoo's twin trained at
                      changing shapes, the distributed bench rows, ...; not run by CI)
  zoo                 the model zoo's CPU twin whole: every coil.bench.zoo model at its tiny
                      size, inference and a training step against eager (long; not run by CI)
  architectures       64 transformers architectures beyond the zoo (decoders, encoders,
                      encoder-decoders, vision, speech) at tiny sizes, inference and a training
                      step against fp64 by the benchmark harness's rule
                      (tests-integration/architectures; long; not run by CI)
  fuzz                the graph fuzzer's long run in chunks of separate processes (not run by CI):
                      `nox -s fuzz -- 10000` runs 20 chunks of 500 programs (see
                      tests-integration/fuzz/README.md)
  opinfo              the OpInfo sweep over all of op_db (long; not run by CI, which runs a fixed
                      sample in integration): results in tests-integration/opinfo/results/
  typecheck           mypy --strict over every package
  lint                ruff, the import rule of docs/architecture.md, and docs/configuration.md
                      against the knob registry it is generated from
"""

from __future__ import annotations

import nox

nox.options.default_venv_backend = "uv"
nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["lint", "typecheck", "tests", "integration"]

# folder -> the workspace packages it depends on (its declared dependencies, nothing more)
PACKAGES: dict[str, list[str]] = {
    "packages/knobs": [],
    "packages/memory-planner": [],
    "packages/fx-passes": ["packages/knobs"],
    "packages/lowering-ir": ["packages/knobs"],
    "packages/runtime": ["packages/knobs"],
    "packages/scheduler": ["packages/knobs", "packages/lowering-ir", "packages/memory-planner"],
    "packages/triton-codegen": [
        "packages/knobs",
        "packages/lowering-ir",
        "packages/scheduler",
        "packages/memory-planner",
    ],
    "packages/wrapper-codegen": [
        "packages/knobs",
        "packages/lowering-ir",
        "packages/scheduler",
        "packages/memory-planner",
    ],
    "meta": [
        "packages/knobs",
        "packages/memory-planner",
        "packages/fx-passes",
        "packages/lowering-ir",
        "packages/runtime",
        "packages/scheduler",
        "packages/triton-codegen",
        "packages/wrapper-codegen",
    ],
}
TEST_TOOLS = ["pytest>=8", "hypothesis>=6.100", "numpy>=1.26", "expecttest"]


def _paths(*folders: str) -> list[str]:
    """Local folders as install arguments ("./meta", never the PyPI name "meta")."""
    return [f"./{f}" for f in folders]


def _integration_env() -> list[str]:
    """The whole of coil, with the memory planner's `plot` extra (matplotlib: timeline PNGs)."""
    return [p + "[plot]" if p == "./packages/memory-planner" else p for p in _paths(*PACKAGES["meta"], "meta")]


@nox.session
@nox.parametrize("package", list(PACKAGES))
def tests(session: nox.Session, package: str) -> None:
    """One package's tests, with only that package and its declared dependencies installed."""
    session.install(*_paths(*PACKAGES[package], package), *TEST_TOOLS)
    if package == "packages/memory-planner":
        # the planner must run without torch: prove it is not there
        session.run("python", "-c", "import importlib.util as u; assert u.find_spec('torch') is None")
    session.run("pytest", "-q", f"{package}/tests", *session.posargs)


@nox.session
def integration(session: nox.Session) -> None:
    """End to end: real models compiled with backend="coil" against eager PyTorch."""
    session.install(*_integration_env(), "transformers>=4.45", *TEST_TOOLS)
    session.run("pytest", "-q", "tests-integration", "-m", "not slow", *session.posargs)


@nox.session
def slow(session: nox.Session) -> None:
    """tests-integration's long cases, marked `slow` (not in the default sessions: CI keeps within
    its time): a minute or more each on the interpreter, each a longer form of a case CI runs."""
    session.install(*_integration_env(), "transformers>=4.45", *TEST_TOOLS)
    session.run("pytest", "-q", "tests-integration", "-m", "slow", *session.posargs)


@nox.session
def zoo(session: nox.Session) -> None:
    """The model zoo's CPU twin (not in the default sessions): every coil.bench.zoo model at its
    tiny size, compiled with backend="coil" against eager, inference and one training step; the
    known failures are strict xfails (tests-integration/zoo/known_failures.py). timm and
    torchvision build the vision models that CI's subset leaves out."""
    session.install(*_integration_env(), "transformers>=4.45", "timm", "torchvision", *TEST_TOOLS)
    session.run("pytest", "-q", "tests-integration/zoo", "--zoo-all", *session.posargs)


@nox.session
def architectures(session: nox.Session) -> None:
    """Architectures beyond the zoo (tests-integration/architectures/catalog.py), each at a tiny
    size compiled with backend="coil" against fp64 by the benchmark harness's rule, inference and
    one training step (not in the default sessions: about 20 minutes on two cores)."""
    session.install(*_integration_env(), "transformers>=4.45", *TEST_TOOLS)
    session.run("pytest", "-q", "tests-integration/architectures", "--architectures", *session.posargs)


@nox.session
def fuzz(session: nox.Session) -> None:
    """The graph fuzzer's long run (not in the default sessions): N programs in chunks, each chunk
    a separate process, so a crash is reported with its chunk's seed and the run goes on.

    `nox -s fuzz -- 10000` runs 20 chunks of 500 (seeds BASE..BASE+19; BASE random unless
    `--seed`); fails if any chunk failed. Other options (`--chunk`, `--seed`, `--jobs`,
    `--timeout`, `--max-ops`, `--out`): tests-integration/fuzz/run_chunks.py.
    """
    session.install(*_integration_env(), *TEST_TOOLS)
    session.run("python", "tests-integration/fuzz/run_chunks.py", *(session.posargs or ["10000"]))


@nox.session
def opinfo(session: nox.Session) -> None:
    """The OpInfo conformance sweep (CPU interpreter unless CUDA is present); not in CI's sessions.

    Arguments after `--` go to the sweep, e.g. `nox -s opinfo -- --ops '^add$' --max-samples 0`.
    """
    session.install(*_paths(*PACKAGES["meta"], "meta"), *TEST_TOOLS, "expecttest")
    session.chdir("tests-integration")
    session.run("python", "-m", "opinfo.sweep", *session.posargs)


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy --strict over every package's sources."""
    session.install(*[f"-e./{p}" for p in PACKAGES], "transformers>=4.45", "mypy>=1.13", *TEST_TOOLS)
    session.run("mypy", *[f"{p}/src" for p in PACKAGES])


@nox.session
def lint(session: nox.Session) -> None:
    """ruff, the import rule between packages, the generated docs/configuration.md, and the tree's
    house rules (tools/check_tree.py: no history in the tree, file and function sizes, environment
    reads only in the knob registry, no caught error kept with its traceback)."""
    session.install("ruff>=0.8")
    session.run("ruff", "check", ".")
    session.run("python", "tools/check_imports.py")
    session.run("python", "tools/check_config_doc.py")
    session.run("python", "tools/check_tree.py")
