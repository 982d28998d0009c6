"""The zoo's CPU twin: which models run.

By default (CI's `integration` session) only CI_MODELS run, which need transformers alone; the
rest is skipped. `--zoo-all` (set by `nox -s zoo`, which also installs timm and torchvision) runs
every model of coil.bench.zoo.
"""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).parent
# one decoder (RoPE, GQA, RMSNorm, SwiGLU), one encoder (padding mask), one ConvNet (depthwise
# 7x7 convs, LayerNorm, layer scale): fast on the interpreter, all built by transformers
CI_MODELS = ("llama", "bert", "convnext")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--zoo-all", action="store_true", default=False,
                     help="run every zoo model, not only the CI subset (needs timm and torchvision)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip this folder's tests of models outside CI_MODELS unless `--zoo-all` (the hook sees
    every collected item, so it picks this folder's)."""
    if config.getoption("zoo_all", default=False):
        return
    skip = pytest.mark.skip(reason="not in the zoo's CI subset: run `nox -s zoo` (--zoo-all)")
    for item in items:
        callspec = getattr(item, "callspec", None)
        name = callspec.params.get("name") if callspec is not None else None
        if HERE in item.path.parents and name is not None and name not in CI_MODELS:
            item.add_marker(skip)
