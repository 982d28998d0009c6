"""`coil bench --merge`: runs made in parallel over disjoint cases, one report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from coil.backend.cli.main import main
from coil.bench.merge import merge
from coil.bench.report import targets


def _run(cases: dict[str, Any], **head: Any) -> dict[str, Any]:
    base = {"date": "d", "gpu": "G", "torch": "t", "triton": "tr", "transformers": None, "modes": ["eager", "coil"],
            "settings": {"modes": "eager,coil"}, "copy_gbs": {}, "total_s": 10.0, "cases": cases}
    return {**base, **head}


def _row(ms: float, ok: bool = True) -> dict[str, Any]:
    return {"kind": "model", "eager": {"ms": 2 * ms}, "coil": {"ms": ms, "accuracy_ok": ok}}


def test_merge_keeps_every_case_in_run_order_under_one_head(tmp_path: Path) -> None:
    a = _run({"zoo_b_infer_bf16": _row(1.0)}, total_s=30.0)
    b = _run({"zoo_a_infer_bf16": _row(2.0), "zoo_c_infer_bf16": _row(3.0, ok=False)})
    merged = merge([a, b], ["zoo_a_infer_bf16", "zoo_b_infer_bf16", "zoo_c_infer_bf16"])
    assert list(merged["cases"]) == ["zoo_a_infer_bf16", "zoo_b_infer_bf16", "zoo_c_infer_bf16"]
    assert merged["total_s"] == 30.0 and merged["lanes"] == 2 and merged["gpu"] == "G"
    assert "accuracy failures or errors: zoo_c_infer_bf16 coil" in "\n".join(targets(merged))
    for i, r in enumerate((a, b)):
        (tmp_path / str(i)).mkdir()
        (tmp_path / str(i) / "bench.json").write_text(json.dumps(r))
    out = tmp_path / "out"
    assert main(["bench", "zoo_mistral:infer", "--merge", str(tmp_path / "0"), str(tmp_path / "1"),
                 str(tmp_path / "absent"), "--out", str(out)]) == 0
    assert json.loads((out / "bench.json").read_text())["cases"].keys() == merged["cases"].keys()
    assert "zoo_c_infer_bf16" in (out / "bench.md").read_text()


def test_merge_refuses_runs_that_do_not_compare() -> None:
    with pytest.raises(ValueError, match="'torch' differ"):
        merge([_run({"x": _row(1.0)}), _run({"y": _row(1.0)}, torch="other")])
    with pytest.raises(ValueError, match="'x' is in two"):
        merge([_run({"x": _row(1.0)}), _run({"x": _row(1.0)})])
    with pytest.raises(ValueError, match="no report"):
        merge([])


def test_the_accuracy_line_names_only_the_modes_the_run_had() -> None:
    """A run of eager and coil alone does not list Inductor as failing."""
    assert "accuracy: all pass" in targets(_run({"zoo_a_infer_bf16": _row(1.0)}))
