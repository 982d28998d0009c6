"""`coil bench --warm-runs`: a model case's warm start is the median of several new processes."""

from __future__ import annotations

from typing import Any

import pytest
from coil.backend.cli.main import main
from coil.bench import model_runs as bench_models
from coil.bench.model_runs import WARM_RUNS, WARM_RUNS_ENV, warm_median, warm_runs, warm_starts
from coil.bench.report import targets
from coil.knobs import knobs


def test_the_median_of_the_processes_is_reported() -> None:
    runs: list[float | str] = [3.2, 5.8, 4.1]
    assert warm_median(runs) == sorted(x for x in runs if isinstance(x, float))[1] == 4.1
    assert warm_median([2.0, 4.0]) == 3.0
    assert warm_median([7.5]) == 7.5


def test_a_failed_warm_process_is_reported_not_averaged_away() -> None:
    assert warm_median([3.0, "timeout", 3.1, "failed (exit 1): boom"]) == "timeout"
    with pytest.raises(ValueError, match="no warm-start process"):
        warm_median([])


def test_the_number_of_runs_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(WARM_RUNS_ENV, raising=False)
    assert warm_runs() == WARM_RUNS == 3
    monkeypatch.setenv(WARM_RUNS_ENV, "5")
    assert warm_runs() == 5
    for bad in ("0", "-2", "three"):
        monkeypatch.setenv(WARM_RUNS_ENV, bad)
        with pytest.raises(ValueError, match=f"{WARM_RUNS_ENV}={bad!r}: expected a positive integer"):
            warm_runs()


def test_each_compiled_mode_runs_that_many_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every process gets the same cache folders; the verdicts, peak and Dynamo report are the
    first process's; eager runs one process whatever the setting."""
    calls: list[tuple[str, str, dict[str, str]]] = []
    seconds = iter([4.0, 3.0, 3.5, 9.0])

    def fake(case: str, mode: str, env: dict[str, str], timeout_s: float = 600.0
             ) -> tuple[float, list[dict[str, Any]], dict[str, Any], dict[str, Any]]:
        calls.append((case, mode, env))
        n = len(calls)
        return next(seconds), [{"name": f"g{n}"}], {"peak_mib": float(n)}, {"traced": n}

    monkeypatch.setattr(bench_models, "new_process_first_call", fake)
    monkeypatch.setenv(WARM_RUNS_ENV, "3")
    env = {"COIL_CACHE_DIR": "/somewhere"}
    runs, caches, peak, dynamo = warm_starts("gpt2_infer_bf16", "coil", env)
    assert runs == [4.0, 3.0, 3.5] and warm_median(runs) == 3.5
    assert calls == [("gpt2_infer_bf16", "coil", env)] * 3
    assert (caches, peak, dynamo) == ([{"name": "g1"}], {"peak_mib": 1.0}, {"traced": 1})
    assert warm_starts("gpt2_infer_bf16", "eager", env)[0] == [9.0] and len(calls) == 4


def test_the_cli_passes_warm_runs_to_the_case_processes(monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str], tmp_path: object) -> None:
    import torch

    monkeypatch.setenv(WARM_RUNS_ENV, "")  # restored after the test: main() sets it
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit):
        main(["bench", "gpt2_infer_bf16", "--warm-runs", "-1", "--out", str(tmp_path)])
    assert "--warm-runs -1: expected 0 or more" in capsys.readouterr().err
    assert main(["bench", "gpt2_infer_bf16", "--warm-runs", "2", "--out", str(tmp_path)]) == 2  # no CUDA
    assert knobs.environ()[WARM_RUNS_ENV] == "2" and warm_runs() == 2


def _model(cold: float, warm: list[float]) -> dict[str, Any]:
    return {"kind": "model", "warm_first_call_runs_s": warm, "warm_first_call_s": warm_median(list(warm)),
            "first_call_s": cold, "ms": 1.0, "accuracy_ok": True}


def test_the_report_gives_each_warm_ratio_and_counts_the_quarter_target() -> None:
    report = {"cases": {
        "gpt2_infer_bf16": {"kind": "model", "eager": {"ms": 9.0}, "inductor": _model(18.0, [4.0, 4.2, 3.9]),
                            "coil": _model(13.0, [3.2, 5.8, 3.1])},
        "bert_base_infer_bf16": {"kind": "model", "eager": {"ms": 9.0}, "inductor": _model(16.0, [4.7, 4.6, 4.8]),
                                 "coil": _model(10.0, [3.4, 3.3, 5.2])},
    }}
    lines = targets(report)
    warm = next(x for x in lines if x.startswith("warm-cache / cold first call"))
    assert "(new processes; warm: the median of 3)" in warm
    assert "gpt2_infer_bf16 coil 3.2/13.0 s (0.25)" in warm and "bert_base_infer_bf16 coil 3.4/10.0 s (0.34)" in warm
    assert "coil's warm start <= 25 % of its cold one: 1/2 (met: gpt2_infer_bf16)" in lines


def test_the_report_says_how_each_warm_graph_was_served() -> None:
    """A frontend-cache hit is named as such; any other graph by torch's AOT-cache verdict."""
    caches = [{"name": "inference_0", "graph_cache": "hit", "aot_cache": "off", "frontend_cache": "hit"}]
    train = [{"name": "forward_0", "graph_cache": "hit", "aot_cache": "hit", "frontend_cache": "off"},
             {"name": "backward_1", "graph_cache": "hit", "aot_cache": "hit", "frontend_cache": "off"}]
    report = {"cases": {
        "gpt2_infer_bf16": {"kind": "model", "eager": {"ms": 9.0}, "inductor": _model(18.0, [4.0]),
                            "coil": {**_model(13.0, [3.2]), "warm_graph_caches": caches}},
        "gpt2_train_amp": {"kind": "model", "eager": {"ms": 9.0}, "inductor": _model(18.0, [4.0]),
                           "coil": {**_model(13.0, [3.2]), "warm_graph_caches": train}},
    }}
    line = next(x for x in targets(report) if x.startswith("coil's warm start, per graph"))
    assert line.endswith("gpt2_infer_bf16 frontend hit; gpt2_train_amp hit,hit"), line


def test_the_targets_count_the_rows_where_both_modes_ran() -> None:
    """A run of coil without CUDA graphs and Inductor default only (`--modes inductor,coil_nocg`)
    judges coil_nocg, over the rows both timed; with no eager row there is no line against eager."""
    def row(first: float) -> dict[str, Any]:
        return {"ms": 1.0, "first_call_s": first, "accuracy_ok": True}

    report = {"modes": ["inductor", "coil_nocg"], "cases": {
        "zoo_resnet50_infer_bf16": {"kind": "model", "inductor": row(10.0), "coil_nocg": row(8.0)},
        "zoo_deit_s_infer_bf16": {"kind": "model", "inductor": row(7.0), "coil_nocg": row(7.5)},
        "zoo_t5_infer_bf16": {"kind": "model", "inductor": row(24.0), "coil_nocg": {"error": "boom"}},
    }}
    lines = targets(report)
    assert ("cold first call (compile) coil_nocg <= inductor: 1/2 cases; models: zoo_resnet50_infer_bf16"
            in lines), lines
    assert not any("than eager" in x for x in lines), lines
    report["settings"] = {"first calls": "bench process (quick)"}
    line = next(x for x in targets(report) if x.startswith("cold first call"))
    assert line.endswith("not a comparison (without --quick each first call runs in a new process)"), line
