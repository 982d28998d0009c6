"""The architecture sweep runs only when asked (`--architectures`, set by `nox -s architectures`):
some 60 models on the interpreter take about 20 minutes, beyond CI's budget."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).parent


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--architectures", action="store_true", default=False,
                     help="run the sweep of architectures beyond the zoo (tests-integration/architectures)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip this folder's tests unless `--architectures`."""
    if config.getoption("architectures", default=False):
        return
    skip = pytest.mark.skip(reason="the architecture sweep: run `nox -s architectures`")
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(skip)
