"""The frozen public API of coil.knobs."""

from __future__ import annotations

import coil.knobs

PUBLIC_API = ["KNOBS", "OWNERS", "Knob", "Knobs", "Registry", "UnknownKnobError", "knobs"]


def test_public_api_is_frozen() -> None:
    assert sorted(coil.knobs.__all__) == sorted(PUBLIC_API)
    for name in PUBLIC_API:
        assert hasattr(coil.knobs, name)


def test_importing_imports_no_third_party_module() -> None:
    import subprocess
    import sys

    code = ("import sys, coil.knobs; bad = [m for m in ('torch', 'triton', 'numpy', 'sympy') "
            "if m in sys.modules]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)
