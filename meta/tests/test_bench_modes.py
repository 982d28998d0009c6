"""`coil bench`'s modes: what each compiles with, how they are chosen, and how the report pairs
them (coil against Inductor reduce-overhead, coil without CUDA graphs against Inductor's
default, coil against eager)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from coil.bench import measure, pairs
from coil.bench.measure import (
    ALL_MODES,
    COIL_NOCG,
    EXTRA_MODES,
    MODES,
    PEERS,
    compile_mode,
    mark_step,
)
from coil.bench.report import render
from coil.bench.runner import parse_modes


def test_each_mode_compiles_as_the_protocol_says(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[dict[str, Any]] = []

    def fake_compile(fn: object, **kwargs: Any) -> object:
        seen.append(kwargs)
        return fn

    monkeypatch.setattr(torch, "compile", fake_compile)

    def fn(x: Any) -> Any:
        return x

    assert compile_mode(fn, "eager") is fn and seen == []
    for mode in MODES[1:]:
        compile_mode(fn, mode)
    assert seen == [{}, {"mode": "reduce-overhead"}, {"backend": "coil"},
                    {"backend": "coil", "options": {"cuda_graphs": False, "cuda_graphs_training": False}}]
    seen.clear()
    for mode in EXTRA_MODES:  # the gemm and attention groups' own (flex compiles the case's flex form)
        compile_mode(fn, mode)
    assert seen == [{"mode": "max-autotune-no-cudagraphs"}, {},
                    {"backend": "coil", "mode": "max-autotune-no-cudagraphs"}]
    assert set(ALL_MODES) == {*MODES, *EXTRA_MODES} == {*MODES, "inductor_max", "flex", "coil_max"}
    with pytest.raises(ValueError, match="unknown bench mode 'max'"):
        compile_mode(fn, "max")
    assert PEERS == {"coil": "inductor_ro", "coil_nocg": "inductor"}


def test_coil_nocg_options_are_coil_knobs() -> None:
    """torch.compile hands `options` to coil, which takes them as knob overrides for the compile."""
    from coil.backend.config.options import resolve

    assert resolve(options=COIL_NOCG) == {"cuda_graphs": False, "cuda_graphs_training": False}


def test_coil_nocg_compiles_and_runs() -> None:
    x = torch.randn(64)
    torch._dynamo.reset()
    got = compile_mode(lambda t: torch.relu(t * 2 + 1), "coil_nocg")(x)
    torch.testing.assert_close(got, torch.relu(x * 2 + 1))
    torch._dynamo.reset()


def test_only_inductor_reduce_overhead_marks_its_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    marks: list[int] = []
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin", lambda: marks.append(1))
    for mode in MODES:
        mark_step(mode)
    assert marks == [1]


def test_modes_are_checked_and_put_in_order() -> None:
    assert parse_modes(["coil_nocg", "eager", "coil"]) == ("eager", "coil", "coil_nocg")
    assert parse_modes(list(MODES)) == MODES
    with pytest.raises(ValueError, match=r"unknown modes \['inductor-ro'\]"):
        parse_modes(["inductor-ro"])
    with pytest.raises(ValueError, match="no modes"):
        parse_modes([])


def test_coil_counts() -> None:
    graphs: list[dict[str, Any]] = [{"name": "forward_0", "fallbacks": ["aten.sort.default", "aten.topk.default"], "eager_fallback": None},
              {"name": "backward_1", "fallbacks": [], "eager_fallback": "CoilCompileError: lowering"},
              {"name": "inference_2", "fallbacks": ["aten.nonzero.default"], "eager_fallback": None}]
    assert measure.coil_counts(graphs) == {"graphs_compiled": 3, "graphs_eager": 1, "aten_fallbacks": 3}
    assert measure.coil_counts([]) == {"graphs_compiled": 0, "graphs_eager": 0, "aten_fallbacks": 0}


def test_cuda_graph_counts_read_the_live_runners() -> None:
    """Runners made without a capture (no GPU here), in the states a run leaves them in."""
    from coil.runtime import CudaGraphRunner

    def runner(captured: bool, error: bool, uncaptured: int, pool: str) -> CudaGraphRunner:
        r = object.__new__(CudaGraphRunner)
        r.graph = object() if captured else None  # type: ignore[assignment]
        r.capture_error = RuntimeError("moved") if error else None
        r.uncaptured_calls, r._pool = uncaptured, pool
        return r

    before = measure.cuda_graph_counts()
    live = [runner(True, False, 2, "p0"), runner(True, True, 0, "p0"), runner(False, True, 5, "p1")]
    got = measure.cuda_graph_counts()
    assert {k: got[k] - before[k] for k in ("cuda_graphs", "cuda_graphs_stopped", "uncaptured_calls")} == {
        "cuda_graphs": 1, "cuda_graphs_stopped": 2, "uncaptured_calls": 7}
    assert got["cuda_graph_pools"] >= 2
    assert measure.cuda_graph_stops().get("RuntimeError: moved", 0) >= 2  # both stopped runners say why
    del live


def _row(group: str, **ms: float) -> dict[str, Any]:
    return {"kind": "model", "group": group, **{m: {"ms": v, "accuracy_ok": True} for m, v in ms.items()}}


def _report() -> dict[str, Any]:
    cases = {
        "gpt2_infer_bf16": _row("models", eager=10.0, inductor=8.0, inductor_ro=5.0, coil=4.0, coil_nocg=9.0),
        "zoo_llama_train_amp": _row("zoo", eager=20.0, inductor=10.0, inductor_ro=8.0, coil=10.0, coil_nocg=9.0),
        "zoo_t5_train_amp": {**_row("zoo", eager=6.0, inductor=4.0, inductor_ro=4.0, coil_nocg=3.0),
                             "coil": {"error": "OutOfMemoryError: CUDA out of memory"}},
        "zoo_swin_t_infer_bf16": {"kind": "model", "group": "zoo", "error": "build: ImportError: no timm"},
        "zoo_bart_infer_bf16": {"skipped": "time budget (500 s used of 480)"},
    }
    return {"date": "today", "gpu": "a GPU", "torch": "2", "triton": "3", "modes": list(MODES), "copy_gbs": {},
            "cases": cases}


def test_pairs_take_the_geomean_over_the_rows_where_both_ran() -> None:
    cases = _report()["cases"]
    c = pairs.compare(cases, "coil", "inductor_ro")
    assert c.ratios == {"gpt2_infer_bf16": 0.8, "zoo_llama_train_amp": 1.25}
    assert c.geomean == pytest.approx(1.0)
    assert c.slower == {"zoo_llama_train_amp": 1.25}
    assert c.missing == ["zoo_t5_train_amp", "zoo_swin_t_infer_bf16"]  # the skipped row is no row
    nocg = pairs.compare(cases, "coil_nocg", "inductor")
    assert nocg.geomean == pytest.approx((9 / 8 * 0.9 * 0.75) ** (1 / 3))
    assert list(nocg.slower) == ["gpt2_infer_bf16"]
    assert pairs.geomean([2.0, 8.0]) == pytest.approx(4.0)
    with pytest.raises(ValueError):
        pairs.geomean([])


def test_pair_lines_per_group_and_only_for_modes_that_ran() -> None:
    cases = _report()["cases"]
    lines = pairs.lines(cases, MODES)
    assert lines[0] == ("coil / inductor_ro time: geomean 1.000 over 2 rows (coil 1.00x as fast); "
                        "2 rows without both; slower in zoo_llama_train_amp 1.25")
    assert "coil / inductor_ro time (models rows): geomean 0.800 over 1 rows (coil 1.25x as fast); never slower" in lines
    assert any(x.startswith("coil / eager time: geomean 0.447 over 2 rows (coil 2.24x as fast)") for x in lines)
    assert any(x.startswith("coil_nocg / inductor time (zoo rows): geomean 0.822 over 2 rows") for x in lines)
    only = pairs.lines(cases, ["eager", "coil"])
    assert len(only) == 3 and all(x.startswith("coil / eager time") for x in only)  # all rows, models, zoo
    assert pairs.lines({}, MODES)[0] == "coil / inductor_ro time: no row where both ran (0 without both)"


def test_bench_md_has_every_mode_the_pairs_and_the_errors() -> None:
    md = render(_report())
    head = ("| case | eager ms | inductor ms | inductor_ro ms | coil ms | coil_nocg ms | coil / inductor_ro "
            "| coil_nocg / inductor | coil / eager | accuracy inductor / inductor_ro / coil / coil_nocg |")
    assert head in md
    assert "| gpt2_infer_bf16 | 10.000 | 8.000 | 5.000 | 4.000 | 9.000 | 0.80 | 1.12 | 0.40 | pass / pass / pass / pass |" in md
    assert "| zoo_t5_train_amp | 6.000 | 4.000 | 4.000 | — | 3.000 | — | 0.75 | — | pass / pass / ERROR / pass |" in md
    assert "| zoo_swin_t_infer_bf16 | ERROR: build: ImportError: no timm |" in md
    assert "| zoo_bart_infer_bf16 | skipped: time budget (500 s used of 480) |" in md
    assert "- coil / inductor_ro time: geomean 1.000 over 2 rows" in md
    assert "| zoo_llama_train_amp | coil | 10.000 | — | — | — | — / — | pass | — |" in md
    assert "- zoo_t5_train_amp coil: OutOfMemoryError: CUDA out of memory" in md
    assert "- zoo_swin_t_infer_bf16: build: ImportError: no timm" in md
