"""coil.backend's own tests: knobs, the CLI, stats, and the backend's registration."""

from __future__ import annotations

from importlib.metadata import entry_points

import coil.backend
import pytest
from coil.backend import KNOBS, GraphStats
from coil.backend.cli.main import main
from coil.knobs import knobs


def test_knob_defaults_and_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COIL_FALLBACK_ON_ERROR", raising=False)
    assert knobs.fallback_on_error is True
    monkeypatch.setenv("COIL_FALLBACK_ON_ERROR", "0")
    assert knobs.fallback_on_error is False
    monkeypatch.setenv("COIL_FALLBACK_ON_ERROR", "maybe")
    with pytest.raises(ValueError, match="COIL_FALLBACK_ON_ERROR"):
        _ = knobs.fallback_on_error


def test_override_is_scoped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COIL_FUSION", raising=False)
    with knobs.override(fusion=False):
        assert knobs.fusion is False
        with knobs.override(fusion=True):
            assert knobs.fusion is True
        assert knobs.fusion is False
    assert knobs.fusion is True


def test_unknown_knob_is_an_error() -> None:
    with pytest.raises(AttributeError, match="no knob"):
        _ = knobs.nonexistent
    owned = {name for name, knob in KNOBS.items() if knob.owner == "coil.backend"}
    assert owned == {"fallback_on_error", "fusion", "fusion_visit_order", "reuse", "arena", "reduction_strategy", "cuda_graphs", "order_time", "logs", "debug_dir",
                          "progress", "check_nan", "check_lifetimes", "debug_asserts", "check_inputs", "graph_cache",
                          "cuda_graphs_training", "cuda_graph_lazy_clones", "indirect_inputs", "recompute_param_casts", "cuda_graph_segments_uncaptured", "aot_cache", "autotune",
                          "autotune_min_bytes", "autotune_extra_min_bytes", "prehash", "frontend_cache",
                          "matmul_templates", "attention"}


def test_autotune_modes(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch
    from coil.backend.pipeline.autotune import enabled, mode

    cuda, cpu = torch.device("cuda", 0), torch.device("cpu")
    monkeypatch.delenv("COIL_AUTOTUNE", raising=False)
    with knobs.override(triton_interpret=False):
        assert mode() == "auto" and enabled(cuda) and not enabled(cpu)  # compiled GPU kernels only
        monkeypatch.setenv("COIL_AUTOTUNE", "1")
        assert mode() == "auto" and enabled(cuda) and not enabled(cpu)
        monkeypatch.setenv("COIL_AUTOTUNE", "always")
        assert enabled(cuda) and enabled(cpu)
        monkeypatch.setenv("COIL_AUTOTUNE", "0")
        assert mode() == "off" and not enabled(cuda) and not enabled(cpu)
    with knobs.override(triton_interpret=True):
        monkeypatch.setenv("COIL_AUTOTUNE", "auto")
        assert not enabled(cuda)  # interpreted: timings mean nothing
    monkeypatch.setenv("COIL_AUTOTUNE", "sometimes")
    with pytest.raises(ValueError, match="COIL_AUTOTUNE"):
        mode()


def test_cli_requires_a_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main([])
    assert info.value.code == 2
    assert "demo" in capsys.readouterr().err


def test_backend_is_registered_as_coil() -> None:
    eps = [e for e in entry_points(group="torch_dynamo_backends") if e.name == "coil"]
    assert len(eps) == 1
    assert eps[0].load() is coil.backend.coil_backend


def test_stats_count_fused_ops() -> None:
    s = GraphStats("g", ir_ops=10, kernels=3)
    assert s.ops_fused == 7


def test_public_api_snapshot() -> None:
    assert sorted(coil.backend.__all__) == [
        "COMPILED", "CoilCheckError", "CoilCompileError", "GraphStats", "KNOBS", "coil_backend", "compile_graph", "knobs", "measure_peaks",
        "reset",
    ]
