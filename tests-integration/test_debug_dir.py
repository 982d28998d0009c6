"""COIL_DEBUG_DIR and COIL_LOGS: every artefact of a compiled graph, and repros that reproduce."""

from __future__ import annotations

import importlib.util
import json
import logging
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import coil.lowering_ir.registry as registry
import pytest
import torch
from coil.backend import COMPILED, CoilCompileError, compile_graph
from coil.knobs import knobs
from models import TransformerBlock

aten = torch.ops.aten
ARTEFACTS = ["README.txt", "00_input_graph.txt", "01_post_grad/index.txt", "02_post_grad_graph.txt",
             "03_lowered_ir.txt", "04_schedule.txt", "05_memory_plan.txt", "07_wrapper.py", "08_wrapper_fx.txt",
             "repro.py", "repro_graph.py", "repro_inputs.json"]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
HAS_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None


def test_transformer_block_debug_dir_holds_every_artefact_and_reproduces(tmp_path: Path, device: torch.device) -> None:
    torch.manual_seed(0)
    model = TransformerBlock().to(device)
    x = torch.randn(2, 8, 32, device=device)
    with knobs.override(debug_dir=str(tmp_path), fallback_on_error=False), torch.no_grad():
        out = torch.compile(model, backend="coil")(x)
        torch.testing.assert_close(out, model(x), atol=1e-4, rtol=1e-4)
    stats = COMPILED[-1]
    folder = tmp_path / stats.name
    for rel in ARTEFACTS:
        assert (folder / rel).is_file(), rel
    assert not (folder / "error.txt").exists()
    # the input FX graph, then the graph after each post-grad pass that changed it
    assert "def forward(self" in (folder / "00_input_graph.txt").read_text()
    assert len(list((folder / "01_post_grad").glob("[0-9][0-9]_*.txt"))) >= 1
    assert "modified" in (folder / "01_post_grad/index.txt").read_text()
    # the memory timeline: a real PNG when matplotlib is there (the integration env has it)
    png, csv = folder / "06_memory_timeline.png", folder / "06_memory_timeline.csv"
    if HAS_MATPLOTLIB:
        assert png.read_bytes().startswith(PNG_MAGIC) and png.stat().st_size > 1000
    else:
        assert csv.is_file() and "matplotlib is not installed" in (folder / "README.txt").read_text()
    # kernels, each with its provenance comment
    kernels = sorted((folder / "kernels").glob("kernel*.py"))
    assert len(kernels) == stats.kernels > 0
    for k in kernels:
        assert f"# kernel {k.stem}: " in k.read_text() and "fused FX nodes:" in k.read_text()
    ir = (folder / "03_lowered_ir.txt").read_text()
    assert "computed buffers:" in ir and "stride [" in ir and "store buf" in ir
    # the schedule with its fusion groups and decisions
    sched = (folder / "04_schedule.txt").read_text()
    assert "fusion log" in sched and "kept " in sched and "FUSED" in sched
    assert all(k.stem in sched for k in kernels)
    plan = (folder / "05_memory_plan.txt").read_text()
    assert "peak bytes with reuse" in plan and re.search(r"^buf\d+ .* (own|reuses buf\d+)", plan, flags=re.M)
    # the wrapper as Python and as FX: one FX launch node per kernel call of the Python wrapper
    wrapper = (folder / "07_wrapper.py").read_text()
    assert "def make(device, constants, kernels)" in wrapper
    py_launches = re.findall(r"^\s+k_(\w+)\(", wrapper, flags=re.M)
    fx = (folder / "08_wrapper_fx.txt").read_text()
    fx_launches = re.findall(r"call_function\[target=coil\.wrapper_codegen\.emit_fx\.launch\]\(args = \(%k_(\w+),", fx)
    assert len(py_launches) >= stats.kernels and sorted(fx_launches) == sorted(py_launches)
    assert "torch.ops.aten." in fx and "emit_fx.free" in fx  # extern calls and frees are nodes too
    meta = json.loads((folder / "repro_inputs.json").read_text())
    assert meta["inputs"][0]["shape"] == [2, 8, 32] and meta["kind"] == "inference"

    # the repro recompiles the graph the same way in a fresh process and matches eager
    env = {**knobs.environ(), "COIL_DEBUG_DIR": ""}
    run = subprocess.run([sys.executable, str(folder / "repro.py")], capture_output=True, text=True, env=env,
                         timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "MATCH" in run.stdout and "MISMATCH" not in run.stdout
    assert f"compiled to {stats.kernels} kernels and {stats.externs} externs" in run.stdout, run.stdout


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


def test_graph_with_a_tensor_constant_writes_its_repro(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A tensor constant (get_attr) was copied under AOTAutograd's FakeTensorMode and the whole
    folder was lost ("Please convert all Tensors to FakeTensors"), e.g. for HF Llama."""
    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x * torch.tensor([1.0, -2.0, 3.0]))  # a constant of the graph

    torch._dynamo.reset()
    x = torch.randn(4, 3)
    with knobs.override(debug_dir=str(tmp_path), fallback_on_error=False), caplog.at_level(logging.WARNING):
        torch.testing.assert_close(torch.compile(fn, backend="coil")(x), fn(x))
    assert "could not write" not in caplog.text
    folders = [p for p in tmp_path.iterdir() if (p / "repro.py").exists()]
    assert folders and all((p / "repro_constants.pt").exists() for p in folders)
