"""A mode knob's value: one parser for COIL_AUTOTUNE, COIL_MATMUL_TEMPLATES and COIL_ATTENTION."""

from __future__ import annotations

import pytest
from coil.backend.config.modes import knob_mode
from coil.backend.pipeline import attention, autotune, matmul_templates
from coil.knobs import knobs


def test_modes_and_words_for_off() -> None:
    modes = ("off", "auto", "always")
    assert [knob_mode("K", v, modes) for v in (" Auto ", "ALWAYS", "off", "0", "False", "no")] == [
        "auto", "always", "off", "off", "off", "off"]


def test_an_unknown_value_names_the_knob() -> None:
    with pytest.raises(ValueError, match=r"COIL_X='sometimes': expected one of off, auto"):
        knob_mode("COIL_X", "sometimes", ("off", "auto"))


@pytest.mark.parametrize(("module", "knob", "value", "want"), [
    (autotune, "autotune", "1", "auto"), (autotune, "autotune", "yes", "auto"), (autotune, "autotune", "0", "off"),
    (autotune, "autotune", "always", "always"), (matmul_templates, "matmul_templates", "false", "off"),
    (matmul_templates, "matmul_templates", "auto", "auto"), (attention, "attention", "always", "always"),
    (attention, "attention", "no", "off"),
])
def test_each_knob_reads_its_mode(module: object, knob: str, value: str, want: str) -> None:
    with knobs.override(**{knob: value}):
        assert module.mode() == want  # type: ignore[attr-defined]
    with knobs.override(**{knob: "bogus"}), pytest.raises(ValueError, match="bogus"):
        module.mode()  # type: ignore[attr-defined]
