"""`coil bench` on a machine without CUDA, and its parser."""

from __future__ import annotations

import pytest
import torch
from coil.backend.cli.main import main
from coil.bench import zoo
from coil.bench.runner import select, suite_names


def test_bench_without_cuda_exits_2(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                    tmp_path: object) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["bench", "softmax", "--out", str(tmp_path)]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err


def test_bench_lists_the_suite(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--list"]) == 0
    out = capsys.readouterr().out
    for n in ("bias_gelu_bf16", "softmax_fp32", "layernorm_bf16", "rmsnorm_fp32", "sum_dim0_bf16", "sum_dim1_fp32",
              "pointwise_chain_bf16", "cross_entropy_fp32", "gpt2_infer_bf16", "gpt2_train_amp", "bert_base_train_amp",
              "llama_style_infer_bf16", "resnet50_train_amp", "vit_b16_infer_bf16"):
        assert n in out
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    assert "cross_entropy_bf16" in capsys.readouterr().out


def test_bench_selects_subsets() -> None:
    assert select(["softmax"]) == ["softmax_bf16", "softmax_fp32"]
    assert select(["gpt2_train_amp", "sum_dim0_fp32"]) == ["gpt2_train_amp", "sum_dim0_fp32"]
    assert select(["resnet50"]) == ["resnet50_infer_bf16", "resnet50_train_amp"]
    # without names: the micro cases and the five hand-picked models; the zoo is asked for by name
    assert select([]) == select(["micro", "models"]) and len(select([])) == 16 + 10
    assert select(["all"]) == suite_names() and len(suite_names()) == 16 + 12 + 15 + 10 + 4 * len(zoo.names())
    with pytest.raises(ValueError, match="unknown case"):
        select(["nope"])


def test_a_model_case_whose_process_fails_is_reported_not_raised(tmp_path: object) -> None:
    """Model cases run in a process each (model_runs.run_model_in_process): a process that dies
    before writing its result gives an error entry naming its exit status, and the bench goes on."""
    from pathlib import Path

    from coil.bench.model_runs import run_model_in_process

    res = run_model_in_process("no_such_model_train_amp", Path(str(tmp_path)), ("eager", "coil"))
    assert res["kind"] == "model"
    assert res["error"] == "the case's process wrote no result (exit 1)"


def test_the_warm_process_reports_where_each_graph_came_from(monkeypatch: pytest.MonkeyPatch) -> None:
    """The warm-start process prints its first call, each coil graph's cache verdicts, what Dynamo
    did and its own step's warm peak; the bench keeps all four (coil's warm start is only as fast
    as its AOT-cache hits; the peak is the mode's memory measured with no other mode run before
    it); under `--precompile` the process runs with TORCH_CACHING_PRECOMPILE=1."""
    import json
    import subprocess
    from types import SimpleNamespace

    from coil.backend.stats import COMPILED, GraphStats
    from coil.bench import model_runs as bench_models

    saved = list(COMPILED)
    try:  # what the warm process prints, from its COMPILED
        COMPILED[:] = [GraphStats("forward_0", fx_nodes=10), GraphStats("backward_1", fx_nodes=12)]
        COMPILED[0].graph_cache, COMPILED[0].aot_cache = "hit", "hit"
        printed = (f"first_call_s=9.5\ngraph_caches={json.dumps(bench_models.graph_caches())}\n"
                   'dynamo={"traced": 0, "cache": {"dynamo_cache_hit": 1}}\n'
                   'warm_peak={"peak_mib": 3102.0, "peak_allocated_mib": 683.7}\n')
    finally:
        COMPILED[:] = saved
    envs: list[dict[str, str]] = []

    def fake_run(*a: object, **k: object) -> SimpleNamespace:
        envs.append(k["env"])  # type: ignore[arg-type]
        return SimpleNamespace(stdout=printed, stderr="", returncode=0)

    monkeypatch.setattr(subprocess, "run", fake_run)
    monkeypatch.delenv(bench_models.PRECOMPILE_ENV, raising=False)
    monkeypatch.delenv("TORCH_CACHING_PRECOMPILE", raising=False)
    seconds, caches, peak, dynamo = bench_models.new_process_first_call("gpt2_train_amp", "coil", {})
    assert "TORCH_CACHING_PRECOMPILE" not in envs[-1]
    monkeypatch.setenv(bench_models.PRECOMPILE_ENV, "1")  # coil bench --precompile
    assert bench_models.new_process_first_call("gpt2_train_amp", "coil", {})[3] == dynamo
    assert envs[-1]["TORCH_CACHING_PRECOMPILE"] == "1"
    assert dynamo == {"traced": 0, "cache": {"dynamo_cache_hit": 1}}
    assert seconds == 9.5
    assert peak == {"peak_mib": 3102.0, "peak_allocated_mib": 683.7}
    assert caches == [{"name": "forward_0", "graph_cache": "hit", "aot_cache": "hit", "frontend_cache": "off",
                       "stage_s": {}},
                      {"name": "backward_1", "graph_cache": "off", "aot_cache": "off", "frontend_cache": "off",
                       "stage_s": {}}]
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: SimpleNamespace(stdout="", stderr="boom", returncode=3))
    assert bench_models.new_process_first_call("gpt2_train_amp", "coil", {}) == ("failed (exit 3): boom", [], None, {})
