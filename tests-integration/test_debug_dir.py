"""COIL_DEBUG_DIR and COIL_LOGS: every artefact of a compiled graph, and repros that reproduce."""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import coil.lowering_ir.registry as registry
import pytest
import torch
from coil.backend import COMPILED, CoilCompileError, compile_graph, knobs
from models import TransformerBlock

aten = torch.ops.aten
ARTEFACTS = ["README.txt", "00_input_graph.txt", "01_post_grad/index.txt", "02_post_grad_graph.txt",
             "03_lowered_ir.txt", "04_schedule.txt", "05_memory_plan.txt", "07_wrapper.py", "repro.py",
             "repro_graph.py", "repro_inputs.json"]


def test_transformer_block_debug_dir_holds_every_artefact_and_reproduces(tmp_path: Path, device: torch.device) -> None:
    torch.manual_seed(0)
    model = TransformerBlock().to(device)
    x = torch.randn(2, 8, 32, device=device)
    with knobs.override(debug_dir=str(tmp_path), fallback_on_error=False), torch.no_grad():
        out = torch.compile(model, backend="coil")(x)
        torch.testing.assert_close(out, model(x), atol=1e-4, rtol=1e-4)
    name = COMPILED[-1].name
    folder = tmp_path / name
    for rel in ARTEFACTS:
        assert (folder / rel).is_file(), rel
    assert not (folder / "error.txt").exists()
    assert len(list((folder / "01_post_grad").glob("[0-9][0-9]_*.txt"))) >= 1
    assert (folder / "06_memory_timeline.png").is_file() or (folder / "06_memory_timeline.csv").is_file()
    kernels = sorted((folder / "kernels").glob("kernel*.py"))
    assert len(kernels) == COMPILED[-1].kernels
    for k in kernels:
        assert f"# kernel {k.stem}: " in k.read_text() and "fused FX nodes:" in k.read_text()
    ir = (folder / "03_lowered_ir.txt").read_text()
    assert "computed buffers:" in ir and "stride [" in ir and "store buf" in ir
    sched = (folder / "04_schedule.txt").read_text()
    assert "fusion log" in sched and "kept " in sched and "FUSED" in sched
    assert "def make(device, constants, kernels)" in (folder / "07_wrapper.py").read_text()
    meta = json.loads((folder / "repro_inputs.json").read_text())
    assert meta["inputs"][0]["shape"] == [2, 8, 32] and meta["kind"] == "inference"

    env = {**os.environ, "COIL_DEBUG_DIR": ""}
    run = subprocess.run([sys.executable, str(folder / "repro.py")], capture_output=True, text=True, env=env,
                         timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "MATCH" in run.stdout and "MISMATCH" not in run.stdout


def _broken(*args: Any, **kwargs: Any) -> Any:
    raise ValueError("injected failure")


def _load_repro(folder: Path) -> Any:
    sys.path.insert(0, str(folder))
    try:
        spec = importlib.util.spec_from_file_location(f"repro_{folder.name}", folder / "repro.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop("repro_graph", None)


def test_compile_error_writes_a_repro_that_reproduces_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         device: torch.device) -> None:
    monkeypatch.setitem(registry.LOWERINGS, aten.exp.default, _broken)
    x = torch.randn(4, 8, device=device)
    with knobs.override(debug_dir=str(tmp_path)), pytest.warns(UserWarning, match="coil failed in stage 'lowering'"):
        out = torch.compile(lambda x: torch.exp(x).sum(-1) * 2.0, backend="coil")(x)
    torch.testing.assert_close(out, torch.exp(x).sum(-1) * 2.0)  # fell back to eager
    folder = tmp_path / COMPILED[-1].name
    error = (folder / "error.txt").read_text()
    assert "stage 'lowering'" in error and "at node 'exp'" in error and "injected failure" in error
    assert "torch.ops.aten.exp.default" in (folder / "repro_graph.py").read_text()
    # the repro's graph, rebuilt from the saved files, fails the same way
    repro = _load_repro(folder)
    inputs = repro.make_inputs(json.loads((folder / "repro_inputs.json").read_text())["inputs"], 0)
    gm = repro.build(inputs)
    with knobs.override(fallback_on_error=False), pytest.raises(CoilCompileError) as info:
        compile_graph(gm, inputs, kind=repro.KIND)
    assert info.value.stage == "lowering" and info.value.node == "exp"


def test_coil_logs_selects_artefacts(caplog: pytest.LogCaptureFixture, device: torch.device) -> None:
    x = torch.randn(4, 8, device=device)
    with knobs.override(logs="fusion,kernels,wrapper,memory_plan,graph"), caplog.at_level(logging.INFO, logger="coil"):
        torch.compile(lambda x: (torch.exp(x) + 1.0).sum(-1), backend="coil")(x)
    by_logger = {r.name for r in caplog.records}
    assert {"coil.fusion", "coil.kernels", "coil.wrapper", "coil.memory_plan", "coil.graph"} <= by_logger
    fusion = "\n".join(r.getMessage() for r in caplog.records if r.name == "coil.fusion")
    assert "fusion log" in fusion
    kernels = "\n".join(r.getMessage() for r in caplog.records if r.name == "coil.kernels")
    assert "@triton.jit" in kernels and "fused FX nodes" in kernels
