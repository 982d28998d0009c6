"""`coil bench`'s training-memory target lines: each fair pair judged on its own rows."""

from __future__ import annotations

from typing import Any

from coil.bench.report import targets


def _train(**growth: float) -> dict[str, Any]:
    return {"kind": "model", **{m: {"ms": 1.0, "growth_reserved_mib": g} for m, g in growth.items()}}


def _lines(cases: dict[str, Any], modes: list[str]) -> list[str]:
    report = {"modes": modes, "settings": {"modes": ",".join(modes)}, "cases": cases}
    return [x for x in targets(report) if x.startswith("training-step reserved growth")]


def test_a_run_without_coil_judges_coil_nocg_against_inductor_default() -> None:
    cases = {"zoo_a_train_amp": _train(inductor=100.0, coil_nocg=90.0),
             "zoo_b_train_amp": _train(inductor=100.0, coil_nocg=128.0),
             "zoo_a_infer_bf16": _train(inductor=1.0, coil_nocg=9.0)}  # not a training row
    assert _lines(cases, ["inductor", "coil_nocg"]) == [
        "training-step reserved growth coil_nocg <= inductor: 1/2; above: zoo_b_train_amp 128 / 100"]


def test_each_pair_counts_only_the_rows_where_both_of_its_modes_ran() -> None:
    cases = {"zoo_a_train_amp": _train(inductor_ro=100.0, coil=100.0, inductor=50.0),
             "zoo_b_train_amp": _train(inductor_ro=100.0, coil=99.0, inductor=80.0, coil_nocg=70.0),
             "zoo_c_train_amp": {"kind": "model", "coil": {"error": "boom"}, "inductor_ro": {"ms": 1.0}}}
    assert _lines(cases, ["inductor", "inductor_ro", "coil", "coil_nocg"]) == [
        "training-step reserved growth coil <= inductor_ro: 2/2",
        "training-step reserved growth coil_nocg <= inductor: 1/1"]
