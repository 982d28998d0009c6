"""Every declared knob is complete: owner, meaning, type, a unique variable; docs are generated."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from coil.knobs import KNOBS, OWNERS, Knob, Knobs, knobs
from coil.knobs.markdown import render

HISTORY = re.compile(r"session \d|\bwas\b|\bms\b|H100|H200|\d+(\.\d+)? ?(s|%)\b|->", re.IGNORECASE)


@pytest.mark.parametrize("name", list(KNOBS))
def test_every_knob_is_complete(name: str) -> None:
    knob = KNOBS[name]
    assert isinstance(knob, Knob) and knob.name == name
    assert knob.owner in OWNERS
    assert knob.meaning and "\n" not in knob.meaning and not HISTORY.search(knob.meaning), knob.meaning
    assert knob.type_name and knob.default_doc
    assert knob.kind in (bool, int, float, str, Path)
    assert knob.env == "" or re.fullmatch(r"[A-Z][A-Z0-9_]*", knob.env)
    assert knob.foreign or knob.env == "" or knob.env.startswith("COIL_")


def test_names_and_variables_are_unique() -> None:
    envs = [k.env for k in KNOBS.values() if k.env]
    assert len(envs) == len(set(envs))
    assert list(KNOBS) == list(Knobs.declared())


def test_every_default_reads_without_error(monkeypatch: pytest.MonkeyPatch) -> None:
    for knob in KNOBS.values():
        if knob.env:
            monkeypatch.delenv(knob.env, raising=False)
    for name, knob in KNOBS.items():
        value = getattr(knobs, name)
        assert value is None or isinstance(value, knob.kind), name


def test_the_markdown_has_one_row_per_knob() -> None:
    text = render()
    for name, knob in KNOBS.items():
        assert f"| {name} | " in text
        if knob.env:
            assert f"`{knob.env}`" in text
    for owner in OWNERS:
        assert f"## {owner}\n" in text


def test_the_checked_in_configuration_doc_is_generated() -> None:
    doc = Path(__file__).resolve().parents[3] / "docs" / "configuration.md"
    if not doc.exists():  # an installed copy of the package, without the repository
        pytest.skip("docs/configuration.md not beside this package")
    assert doc.read_text() == render(), "run: python tools/check_config_doc.py --write"
