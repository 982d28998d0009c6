"""`coil bench`'s model cases: the zoo's cases and how names select them, and how a case's row
is assembled when a model, a mode or the case's process fails (on the CPU, with fakes: no GPU,
no compiler)."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from coil.bench import lanes, measure, model_runs, models, zoo
from coil.bench import spec as bench_spec
from coil.bench.cli import main as bench_main
from coil.bench.model_runs import (
    CaseSettings,
    run_killing_group,
    run_model,
    run_modes_apart,
    unfinished,
)
from coil.bench.report import render
from coil.bench.spec import ModelSpec
from coil.bench.suite import select, suite_names

STEPS = ("infer_bf16", "train_amp", "train_accum", "train_opt")


def test_every_zoo_model_is_four_cases_after_the_five() -> None:
    names = suite_names()
    for n in zoo.names():
        for step in STEPS:
            assert f"zoo_{n}_{step}" in names
    spec, step = models.split(f"zoo_{zoo.names()[0]}_train_accum")
    assert (spec.group, spec.kind, step) == ("zoo", zoo.entry(zoo.names()[0]).kind, "train_accum")
    assert names.index("vit_b16_train_amp") < names.index(f"zoo_{zoo.names()[0]}_infer_bf16")
    with pytest.raises(ValueError, match="not a model case"):
        models.split("gpt2_train_accum")  # the five have no accumulation case
    with pytest.raises(ValueError, match="not a model case"):
        models.split("gpt2_train_opt")  # nor an optimizer step


def test_names_select_zoo_models_groups_families_and_steps() -> None:
    assert select(["gpt2"]) == ["gpt2_infer_bf16", "gpt2_train_amp"]  # the hand-picked GPT-2
    steps = STEPS
    for n in zoo.names():
        assert select([f"zoo_{n}"]) == [f"zoo_{n}_{s}" for s in steps]
        if n not in models.SPECS:  # a zoo model's own name, where no hand-picked model has it
            assert select([n]) == select([f"zoo_{n}"])
    kinds = {zoo.entry(n).kind for n in zoo.names()}
    for kind in kinds:
        want = [f"zoo_{n}_{s}" for n in zoo.names() if zoo.entry(n).kind == kind
                for s in STEPS]
        assert select([f"zoo-{kind}"]) == want
    assert select(["zoo"]) == [c for c in suite_names() if c.startswith("zoo_")]
    family = zoo.entry(zoo.names()[-1]).family  # any case will do: "GPT-NeoX" or "gpt-neox"
    members = [n for n in zoo.names() if zoo.entry(n).family == family]
    assert select([family.lower()]) == select([family.upper()]) == [f"zoo_{n}_{s}" for n in members for s in steps]
    assert select(["zoo-vision:infer"]) == [f"zoo_{n}_infer_bf16" for n in zoo.names() if zoo.entry(n).kind == "vision"]
    assert select(["models:train"]) == [f"{n}_train_amp" for n in ("gpt2", "bert_base", "llama_style", "resnet50",
                                                                   "vit_b16")]
    first = zoo.names()[0]
    assert select(["zoo:accum", f"zoo_{first}"]) == [
        *(f"zoo_{n}_train_accum" for n in zoo.names()), f"zoo_{first}_infer_bf16", f"zoo_{first}_train_amp",
        f"zoo_{first}_train_opt"]
    assert select(["zoo-vision:opt"]) == [f"zoo_{n}_train_opt" for n in zoo.names() if zoo.entry(n).kind == "vision"]
    for bad in ("softmax:infer", "zoo-robots", "gpt2:eval"):
        with pytest.raises(ValueError):
            select([bad])


def test_list_prints_what_the_names_select(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_main(["--list", "zoo-vision:infer", "softmax"]) == 0
    assert capsys.readouterr().out.split() == select(["zoo-vision:infer", "softmax"])
    assert bench_main(["--list"]) == 0
    assert capsys.readouterr().out.split() == suite_names()
    with pytest.raises(SystemExit):
        bench_main(["--list", "nope"])
    assert "unknown case 'nope'" in capsys.readouterr().err


def test_the_command_checks_its_numbers_and_needs_cuda(monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for bad in (["--warm-runs", "-1"], ["--loop-steps", "0"], ["--lane-lock", str(tmp_path / "no" / "lock")]):
        with pytest.raises(SystemExit):
            bench_main(["llama", *bad])
    err = capsys.readouterr().err
    assert "--loop-steps 0: expected a positive integer" in err and "its folder does not exist" in err
    assert bench_main(["zoo-decoder:infer", "--warm-runs", "0", "--quick", "--out", str(tmp_path)]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err


class _Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.lin(x))


def _tiny() -> tuple[Any, Any]:
    torch.manual_seed(0)
    return _Tiny(), (torch.randn(16, 8),)


def _broken() -> tuple[Any, Any]:
    raise ImportError("no module named 'timm'")


def _spec(name: str, make: Any) -> ModelSpec:
    return ModelSpec(name, "a tiny MLP", make, lambda m, x: m(*x), lambda m, x: m(*x).float().pow(2).mean(),
                     steps=STEPS, family="Tiny", kind="vision", group="zoo")


@pytest.fixture
def cpu_bench(monkeypatch: pytest.MonkeyPatch) -> None:
    """The model-case plumbing on the CPU: the device is the CPU, the CUDA memory calls are
    fakes, do_bench runs the step once, and the compilers are stand-ins: every mode runs
    eagerly except coil, whose compile fails."""
    monkeypatch.setattr(bench_spec, "DEVICE", "cpu")
    for fn in ("synchronize", "empty_cache", "reset_peak_memory_stats"):
        monkeypatch.setattr(torch.cuda, fn, lambda: None)
    sizes = {"memory_allocated": 100 * 2**20, "memory_reserved": 128 * 2**20,
             "max_memory_allocated": 150 * 2**20, "max_memory_reserved": 192 * 2**20}
    for fn, size in sizes.items():
        monkeypatch.setattr(torch.cuda, fn, lambda size=size: size)
    monkeypatch.setattr(torch.cuda, "memory_snapshot", lambda: [])
    monkeypatch.setattr(measure, "do_bench", lambda fn, warmup, rep: (fn(), 2.5)[1])
    monkeypatch.setattr(models, "specs", lambda: {"tiny": _spec("tiny", _tiny), "broken": _spec("broken", _broken)})

    def compile_mode(fn: Any, mode: str) -> Any:
        if mode == "coil":
            raise RuntimeError("coil: lowering failed")
        return fn

    monkeypatch.setattr(models, "compile_mode", compile_mode)


def _cold(tag: str) -> Any:
    return contextlib.nullcontext({})


@pytest.mark.parametrize("step", STEPS)
def test_a_row_keeps_every_mode_and_a_failed_modes_error(cpu_bench: None, step: str) -> None:
    written: list[str | None] = []
    res = run_model(f"tiny_{step}", _cold, ("eager", "inductor", "coil", "coil_nocg"),
                    CaseSettings(quick=True, loop_steps=2), lambda r: written.append(r.get("running")))
    assert written == ["build", "eager", "inductor", "coil", "coil_nocg", None]
    assert (res["group"], res["family"], res["step"]) == ("zoo", "Tiny", step)
    assert res["tensors_checked"] == (1 if step == "infer_bf16" else 3)  # output, or loss + weight and bias grads
    for mode in ("eager", "inductor", "coil_nocg"):
        r = res[mode]
        assert r["ms"] == 2.5 and r["loop_ms"] > 0 and r["accuracy_ok"] is True, r
        assert r["growth_allocated_mib"] == 50.0 and r["growth_reserved_mib"] == 64.0
        assert r["peak_where"] == "bench process" and "first_call_s" in r
    assert res["coil"]["error"] == "RuntimeError: coil: lowering failed"
    assert res["coil_nocg"]["graphs_compiled"] == 0 and res["coil_nocg"]["aten_fallbacks"] == 0


def test_a_model_that_fails_to_build_is_a_row_with_its_error(cpu_bench: None) -> None:
    res = run_model("broken_train_amp", _cold, ("eager", "coil"), CaseSettings(quick=True))
    assert res["error"] == "build: ImportError: no module named 'timm'"
    assert "eager" not in res and "running" not in res


def test_a_case_process_cut_short_keeps_its_finished_modes() -> None:
    modes = ("eager", "inductor", "coil", "coil_nocg")
    partial = {"kind": "model", "eager": {"ms": 3.0}, "inductor": {"ms": 2.0}, "running": "coil"}
    res = unfinished(dict(partial), modes, "timeout", 300.0)
    assert res["eager"] == {"ms": 3.0} and "running" not in res
    assert res["coil"] == {"error": "the case's time budget of 300 s ran out during this mode"}
    assert res["coil_nocg"] == {"error": "the case's time budget of 300 s ran out before this mode"}
    died = unfinished({"kind": "model", "running": "build"}, modes, -11, None)
    assert died["error"] == "the case's process ended (exit -11) while building the model and its reference"
    whole = {"kind": "model", **{m: {"ms": 1.0} for m in modes}}
    assert unfinished(dict(whole), modes, 0, 300.0) == whole


def test_a_lane_times_only_once_the_other_lanes_work_ended(cpu_bench: None, monkeypatch: pytest.MonkeyPatch,
                                                          tmp_path: Path) -> None:
    """With a lane lock (coil.bench.lanes), a mode's timed calls wait for another lane's work,
    and a mode that failed leaves no lock behind: another lane can time right after."""
    lock = str(tmp_path / "lock")
    timed: list[float] = []

    def do_bench(fn: Any, warmup: int, rep: int) -> float:
        timed.append(time.monotonic())
        fn()
        return 2.5

    monkeypatch.setattr(measure, "do_bench", do_bench)
    released: list[float] = []
    other_works = threading.Event()

    def other_lane() -> None:
        with lanes.working(lock):
            other_works.set()
            time.sleep(0.5)
            released.append(time.monotonic())

    threads: list[threading.Thread] = []
    compile_mode = getattr(models, "compile_mode")  # noqa: B009  # the fixture's stand-in

    def compile_while_the_other_lane_works(fn: Any, mode: str) -> Any:
        if not threads:  # the first mode's compile: the other lane starts working beside it
            threads.append(threading.Thread(target=other_lane))
            threads[0].start()
            other_works.wait()
        return compile_mode(fn, mode)

    monkeypatch.setattr(models, "compile_mode", compile_while_the_other_lane_works)
    res = run_model("tiny_train_amp", _cold, ("eager", "coil"), CaseSettings(quick=True, loop_steps=2, lane_lock=lock))
    threads[0].join()
    assert res["eager"]["ms"] == 2.5 and res["coil"]["error"] == "RuntimeError: coil: lowering failed"
    assert len(timed) == 1 and timed[0] >= released[0] and "timed_beside_lanes" not in res["eager"]
    start = time.monotonic()
    with lanes.timing_alone(lock, 5.0) as taken:
        assert taken and time.monotonic() - start < 0.5, "a lock was left held"


def test_a_row_timed_beside_another_lanes_work_says_so(cpu_bench: None, monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path: Path) -> None:
    """When the wait for the lane lock runs out (another lane works for longer), the mode is
    timed anyway, its row says so and bench.md lists it."""
    lock = str(tmp_path / "lock")
    monkeypatch.setattr(model_runs, "LANE_WAIT_S", 0.2)
    stop = threading.Event()
    working = threading.Event()

    def other_lane() -> None:
        with lanes.working(lock):
            working.set()
            stop.wait(30)

    t = threading.Thread(target=other_lane)
    t.start()
    working.wait()
    try:
        res = run_model("tiny_infer_bf16", _cold, ("eager",), CaseSettings(quick=True, loop_steps=2, lane_lock=lock))
    finally:
        stop.set()
        t.join()
    assert res["eager"]["ms"] == 2.5 and res["eager"]["timed_beside_lanes"] is True
    report = {"date": "d", "gpu": "g", "torch": "t", "triton": "x", "modes": ["eager"],
              "cases": {"tiny_infer_bf16": res}}
    assert "Timed beside other lanes' work (the wait for the lane lock ran out): tiny_infer_bf16 eager" in render(report)


def test_a_coil_row_counts_the_timed_calls_run_without_their_cuda_graph(cpu_bench: None,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A coil mode's row carries its CUDA graphs, how many graph calls ran uncaptured and how
    many outputs were copied away while it was timed (the counts after the timed calls less those
    before) and in the warm peak's call, why a graph stopped, and bench.md shows them."""
    uncaptured = iter([3, 5, 5])  # before and after do_bench and the loop, after the warm peak's call
    copied = iter([1, 4, 6])

    def counts() -> dict[str, int]:
        return {"cuda_graphs": 4, "cuda_graphs_stopped": 1, "uncaptured_calls": next(uncaptured),
                "outputs_copied_away": next(copied), "cuda_graph_pools": 2}

    monkeypatch.setattr(measure, "cuda_graph_counts", counts)
    monkeypatch.setattr(measure, "cuda_graph_stops", lambda: {"RuntimeError: static input 3 moved": 1})
    res = run_model("tiny_train_amp", _cold, ("eager", "coil_nocg"), CaseSettings(quick=True, loop_steps=2))
    r = res["coil_nocg"]
    assert (r["cuda_graphs"], r["cuda_graphs_stopped"], r["uncaptured_calls_timed"]) == (4, 1, 2), r
    assert r["cuda_graph_stops"] == {"RuntimeError: static input 3 moved": 1}
    assert (r["outputs_copied_away"], r["outputs_copied_away_timed"], r["peak_outputs_copied_away"]) == (4, 3, 2), r
    assert "cuda_graphs" not in res["eager"]
    report = {"date": "d", "gpu": "g", "torch": "t", "triton": "x", "modes": ["eager", "coil_nocg"],
              "cases": {"tiny_train_amp": res}}
    assert ("CUDA graphs 4, stopped 1, uncaptured calls timed 2, outputs copied away 4 (3 timed) "
            "(why: 1 x RuntimeError: static input 3 moved)") in render(report)


def test_settings_travel_to_the_case_process_as_json() -> None:
    s = CaseSettings(warm_runs=0, quick=True, loop_steps=5, deadline=time.time() + 30)
    assert CaseSettings.from_json(s.to_json()) == s and s.runs() == 0
    assert 1.0 <= s.timeout_s() <= 30.0 and CaseSettings().timeout_s() == model_runs.FIRST_CALL_TIMEOUT_S
    with pytest.raises(ValueError):
        CaseSettings(warm_runs=-1)


def test_a_case_over_its_budget_is_killed_with_what_it_started(tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild"
    code = ("import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
            f"open({str(pid_file)!r}, 'w').write(str(p.pid)); time.sleep(60)")
    t0 = time.monotonic()
    assert run_killing_group([sys.executable, "-c", code], 3.0) == "timeout"
    assert time.monotonic() - t0 < 30
    pid = int(pid_file.read_text())
    for _ in range(50):  # the grandchild is gone, or a zombie waiting for its new parent
        status = Path(f"/proc/{pid}/status")
        if not status.exists() or "\nState:\tZ" in status.read_text():
            break
        time.sleep(0.1)
    else:
        os.kill(pid, 9)
        pytest.fail("the case's own processes outlived its budget")
    assert run_killing_group([sys.executable, "-c", "raise SystemExit(3)"], 30.0) == 3


@pytest.fixture
def case_processes(cpu_bench: None, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, ...]]:
    """`run_model_in_process` as `run_model` in this process (the CPU stand-ins of `cpu_bench`);
    the list of the modes each call was given."""
    calls: list[tuple[str, ...]] = []

    def in_process(case: str, root: Path, modes: tuple[str, ...], settings: CaseSettings | None = None,
                   limit_s: float | None = None) -> dict[str, Any]:
        calls.append(modes)
        return run_model(case, _cold, modes, settings)

    monkeypatch.setattr(model_runs, "run_model_in_process", in_process)
    return calls


def test_modes_apart_run_each_mode_alone_in_its_own_case_process(case_processes: list[tuple[str, ...]],
                                                                 tmp_path: Path) -> None:
    """`--mode-processes`: one case process a mode, its row merged into one: every mode's
    figures, the case's own facts once, a failed mode's error."""
    calls = case_processes
    modes = ("eager", "inductor", "coil", "coil_nocg")
    res = run_modes_apart("tiny_train_amp", tmp_path, modes, CaseSettings(quick=True, loop_steps=2), 600.0)
    assert calls == [(m,) for m in modes]
    alone = run_model("tiny_train_amp", _cold, modes, CaseSettings(quick=True, loop_steps=2))
    assert set(res) == set(alone) and res["tensors_checked"] == alone["tensors_checked"] == 3
    for mode in ("eager", "inductor", "coil_nocg"):
        assert res[mode]["ms"] == 2.5 and res[mode]["accuracy_ok"] is True, res[mode]
    assert res["coil"]["error"] == "RuntimeError: coil: lowering failed"


def test_modes_apart_stop_at_a_model_that_does_not_build(case_processes: list[tuple[str, ...]],
                                                         tmp_path: Path) -> None:
    res = run_modes_apart("broken_train_amp", tmp_path, ("eager", "coil"), CaseSettings(quick=True))
    assert case_processes == [("eager",)]
    assert res["error"] == "build: ImportError: no module named 'timm'" and "coil" not in res


def test_modes_apart_share_the_case_budget(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The modes share one time budget: each process gets what is left, and a mode with none left
    says so."""
    given: list[float | None] = []

    def slow(case: str, root: Path, modes: tuple[str, ...], settings: CaseSettings | None = None,
             limit_s: float | None = None) -> dict[str, Any]:
        given.append(limit_s)
        monkeypatch.setattr(model_runs.time, "time", lambda: 1000.0 + 40.0 * len(given))
        return {"kind": "model", modes[0]: {"ms": 1.0}}

    monkeypatch.setattr(model_runs.time, "time", lambda: 1000.0)
    monkeypatch.setattr(model_runs, "run_model_in_process", slow)
    res = run_modes_apart("tiny_infer_bf16", tmp_path, ("eager", "inductor", "coil"), None, 100.0)
    assert given == [100.0, 60.0, 20.0]
    assert res == {"kind": "model", "eager": {"ms": 1.0}, "inductor": {"ms": 1.0}, "coil": {"ms": 1.0}}
    given.clear()
    monkeypatch.setattr(model_runs.time, "time", lambda: 1000.0)
    res = run_modes_apart("tiny_infer_bf16", tmp_path, ("eager", "inductor", "coil"), None, 70.0)
    assert given == [70.0, 30.0]
    assert res["coil"] == {"error": "the case's time budget of 70 s ran out before this mode"}


def test_the_command_passes_mode_processes_to_the_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from coil.bench import cli

    seen: list[CaseSettings] = []

    def run(names: Any, out: Any, budget: Any, modes: Any, rounds: Any, settings: CaseSettings, case_budget: Any) -> int:
        seen.append(settings)
        return 0

    monkeypatch.setattr(cli, "run", run)
    assert bench_main(["llama", "--quick", "--mode-processes", "--out", str(tmp_path)]) == 0
    assert bench_main(["llama", "--quick", "--out", str(tmp_path)]) == 0
    assert [s.mode_processes for s in seen] == [True, False] and all(s.quick for s in seen)
