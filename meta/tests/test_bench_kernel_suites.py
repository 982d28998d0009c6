"""The gemm and attention groups of `coil bench`: how they are selected and listed, the modes they
add (inductor_max, flex), and how the report compares them (pairs, TFLOP/s, the bounded ratios,
the targets)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from coil.backend.cli.main import main
from coil.bench import kernel_report, pairs
from coil.bench.attention import ATTENTION
from coil.bench.gemm import GEMM
from coil.bench.measure import MODES
from coil.bench.report import render
from coil.bench.runner import parse_modes
from coil.bench.suite import case_modes, select, suite_names


def test_list_names_the_groups(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--list", "gemm"]) == 0
    assert capsys.readouterr().out.split() == [c.name for c in GEMM]
    assert main(["bench", "--list", "attention"]) == 0
    assert capsys.readouterr().out.split() == [c.name for c in ATTENTION]
    assert len(GEMM) == 12 and len(ATTENTION) == 15


def test_selection_by_group_form_and_name() -> None:
    assert select(["attn_causal"]) == ["attn_causal_fwd", "attn_causal_fwdbwd"]
    assert select(["gemm_bmm_32x2048x128x2048", "softmax_bf16"]) == ["gemm_bmm_32x2048x128x2048", "softmax_bf16"]
    every = suite_names()
    assert set(select(["gemm", "attention"])) < set(every) and set(select(["all"])) == set(every)
    assert not set(select([])) & set(select(["gemm", "attention"]))  # asked for by name only


def test_each_case_runs_its_groups_modes_or_those_asked_that_apply() -> None:
    assert case_modes("softmax_bf16") == MODES
    assert case_modes("gpt2_infer_bf16") == MODES
    assert case_modes("gemm_bare_8192x4096x11008") == ("eager", "inductor", "inductor_ro", "inductor_max", "coil",
                                                      "coil_nocg", "coil_max")
    assert case_modes("attn_causal_fwd") == ("eager", "inductor", "inductor_ro", "flex", "coil", "coil_nocg")
    asked = parse_modes(["coil", "flex", "inductor_max", "eager"])
    assert asked == ("eager", "inductor_max", "flex", "coil")
    assert case_modes("softmax_bf16", asked) == ("eager", "inductor_max", "coil")
    assert case_modes("attn_gqa_fwdbwd", asked) == asked
    assert case_modes("gemm_bmm_32x2048x128x2048", ("flex",)) == ()
    with pytest.raises(ValueError, match="unknown modes"):
        parse_modes(["flexattention"])


def _row(group: str, ref: str | None = None, limit: float = 1.0, **ms: float) -> dict[str, Any]:
    return {"kind": "kernel", "group": group, "flops": 1e12, "reference_case": ref, "limit": limit,
            **{m: {"ms": v, "tflops": 1e3 / v, "accuracy_ok": True} for m, v in ms.items()}}


def _report() -> dict[str, Any]:
    cases = {
        "gemm_bare_8192x4096x11008": _row("gemm", eager=10.0, inductor_max=9.0, coil=9.5),
        "gemm_bias_gelu_8192x4096x11008": _row("gemm", "gemm_bare_8192x4096x11008", 1.03,
                                               eager=12.0, inductor_max=10.0, coil=10.2),
        "attn_unmasked_fwd": _row("attention", eager=2.0, flex=2.5, coil=2.0),
        "attn_padding_add_fwd": _row("attention", "attn_unmasked_fwd", eager=3.0, flex=2.0, coil=1.8),
        "attn_gqa_fwdbwd": {"kind": "kernel", "group": "attention", "error": "build: OutOfMemoryError"},
    }
    return {"date": "today", "gpu": "a GPU", "torch": "2", "triton": "3", "copy_gbs": {},
            "modes": ["eager", "inductor_max", "flex", "coil"], "cases": cases}


def test_bounded_ratios_hold_a_row_to_its_reference_rows_eager_time() -> None:
    got = kernel_report.bounded(_report()["cases"])
    assert got == {"gemm_bias_gelu_8192x4096x11008": (pytest.approx(1.02), 1.03),
                   "attn_padding_add_fwd": (pytest.approx(0.9), 1.0)}


def test_report_shows_the_pairs_per_group_the_tflops_and_the_targets() -> None:
    report = _report()
    md = render(report)
    assert "| case | eager ms | inductor_max ms | flex ms | coil ms | coil / eager | coil / inductor_max | coil / flex |" in md
    assert "| gemm_bias_gelu_8192x4096x11008 | 12.000 | 10.000 | — | 10.200 | 0.85 | 1.02 | — |" in md
    lines = pairs.lines(report["cases"], report["modes"])
    assert any(x.startswith("coil / inductor_max time (gemm rows): geomean") for x in lines)
    assert any(x.startswith("coil / flex time (attention rows): geomean") for x in lines)
    assert "| gemm_bias_gelu_8192x4096x11008 | 83 / 100 / — / 98 | 1.020 (1.03) vs gemm_bare_8192x4096x11008 |" in md
    assert ("- coil >= inductor_max on gemm cases: 0/2 (behind, coil / inductor_max time: "
            "gemm_bare_8192x4096x11008 1.056, gemm_bias_gelu_8192x4096x11008 1.020)") in md
    assert "- coil >= eager on gemm cases: 2/2" in md
    assert "- coil >= flex on attention cases: 2/2" in md
    assert ("- fused GEMM: coil <= limit x the bare matmul's eager time (epilogue free): 1/1 "
            "(gemm_bias_gelu_8192x4096x11008 1.020)") in md
    assert "- padded attention: coil <= limit x unmasked flash attention's eager time: 1/1" in md
    assert "- accuracy: all pass" in md  # a row without flex is not a flex failure
    assert "- attn_gqa_fwdbwd: build: OutOfMemoryError" in md


def test_run_kernel_plumbing_on_the_cpu(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """run_kernel at a case's small size, eager only, the CUDA calls stubbed: the row has the
    case's fields, eager's errors against the fp64 reference (output and three gradients), a
    time, TFLOP/s and accuracy."""
    import dataclasses

    from coil.bench import kernel_runs, measure
    from coil.bench import spec as bench_spec
    from coil.bench.micro import Ctx

    case = next(c for c in ATTENTION if c.name == "attn_window_fwdbwd")
    small = dataclasses.replace(case, dims=case.small)
    monkeypatch.setattr(bench_spec, "DEVICE", "cpu")
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    monkeypatch.setattr(measure, "do_bench", lambda fn, warmup, rep: 2.0)
    monkeypatch.setattr(measure, "warm_peak", lambda fn, base=None: {"peak_mib": 1.0})
    res = kernel_runs.run_kernel(small, Ctx(tmp_path), ("eager",), rounds=2)
    assert res["kind"] == "kernel" and res["group"] == "attention" and res["backward"] is True
    assert len(res["rmse_eager"]) == 4 and all(e < 1e-2 for e in res["rmse_eager"])
    eager = res["eager"]
    assert eager["accuracy_ok"] is True and "error" not in eager
    assert eager["ms_rounds"] == [2.0, 2.0] and eager["tflops"] == pytest.approx(small.flops(small.dims) / 2e-3 / 1e12)
