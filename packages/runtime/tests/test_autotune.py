"""coil.runtime.autotune on the CPU (Triton interpreter): the choice follows the timer (replaced
here), a candidate computing other values is discarded with a warning, results are cached in
memory and on disk (a damaged entry is rebuilt), and tuning works inside a fake-tensor mode."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
import torch
from coil.runtime import KernelSpec, TensorArg, autotune, disk_cache, timing
from coil.runtime.autotune import Candidate, TuningProblem, tune

SOURCE = '''\
import triton
import triton.language as tl


@triton.jit
def rowsum_xr(in_ptr, out_ptr, n_rows, N_COLS: tl.constexpr, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr):
    rows = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[:, None]
    keep = rows < n_rows
    acc = tl.zeros([XBLOCK, RBLOCK], dtype=tl.float32)
    for start in range(0, N_COLS, RBLOCK):
        cols = start + tl.arange(0, RBLOCK)[None, :]
        acc += tl.load(in_ptr + rows * N_COLS + cols, mask=keep & (cols < N_COLS), other=0.0)
    tl.store(out_ptr + rows, tl.sum(acc, 1)[:, None] SCALE, keep)
'''
ROWS, COLS = 10, 300
CONFIGS = [(4, 64), (2, 128), (8, 32)]  # (XBLOCK, RBLOCK); the first is the default


def _candidate(x: int, r: int, wrong: bool = False, rows: int = ROWS) -> Candidate:
    source = SOURCE.replace("SCALE", "* 1.5" if wrong else "")
    f32 = TensorArg(torch.float32)
    spec = KernelSpec("rowsum_xr", source, (f32, f32, rows), {"N_COLS": COLS, "XBLOCK": x, "RBLOCK": r})
    return Candidate(spec, (-(-rows // x), 1, 1))


def _problem(wrong: int | None = None, rows: int = ROWS) -> TuningProblem:
    cands = tuple(_candidate(x, r, i == wrong, rows) for i, (x, r) in enumerate(CONFIGS))
    return TuningProblem(cands, (rows * COLS, rows), (1,), COLS)


class FakeTimer:
    """A stand-in for timing.measure: milliseconds by XBLOCK; records its calls."""

    def __init__(self, by_xblock: dict[int, float]) -> None:
        self.by_xblock = by_xblock
        self.calls: list[int] = []

    def __call__(self, kernel: object, grid: tuple[int, ...], args: Sequence[object]) -> float:
        x = kernel.spec.constexprs["XBLOCK"]  # type: ignore[attr-defined]
        self.calls.append(x)
        return self.by_xblock[x]


@pytest.fixture
def fresh(cache_dir: object) -> Iterator[None]:
    autotune.clear_memo()
    yield
    autotune.clear_memo()


CPU = torch.device("cpu")


def test_the_timer_decides(fresh: None, monkeypatch: pytest.MonkeyPatch) -> None:
    timer = FakeTimer({4: 1.0, 2: 0.9, 8: 0.5})
    monkeypatch.setattr(timing, "measure", timer)
    (result,) = tune([_problem()], CPU)
    assert result.choice == 2 and result.origin == "tuned" and not result.rejected
    assert result.times_ms == (1.0, 0.9, 0.5) and sorted(timer.calls) == [2, 4, 8]


@pytest.mark.parametrize(("margins", "switch"), [(0.5, False), (2.0, True)])
def test_the_default_stays_unless_clearly_beaten(fresh: None, monkeypatch: pytest.MonkeyPatch, margins: float,
                                                 switch: bool) -> None:
    """A candidate faster than the default by half the switch margin is not taken; by twice it, it is."""
    faster = 1.0 - margins * autotune.SWITCH_MARGIN
    monkeypatch.setattr(timing, "measure", FakeTimer({4: 1.0, 2: faster, 8: 2.0}))
    (result,) = tune([_problem()], CPU)
    assert result.choice == (1 if switch else 0)


def test_a_wrong_candidate_is_discarded_with_a_warning(fresh: None, monkeypatch: pytest.MonkeyPatch,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    """The wrong one is the fastest: checked first, discarded, and the next fastest is kept."""
    timer = FakeTimer({4: 1.0, 2: 0.1, 8: 0.5})
    monkeypatch.setattr(timing, "measure", timer)
    with caplog.at_level(logging.WARNING, logger="coil.runtime"):
        (result,) = tune([_problem(wrong=1)], CPU)
    assert result.choice == 2 and set(result.rejected) == {1} and "wrong output" in result.rejected[1]
    assert result.times_ms == (1.0, 0.1, 0.5)
    (warning,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "rowsum_xr" in warning.getMessage() and "RBLOCK=128 XBLOCK=2 warps=4" in warning.getMessage()


@pytest.mark.parametrize("wrong_time", [2.0, 0.8])
def test_only_a_candidate_that_would_be_kept_is_checked(fresh: None, monkeypatch: pytest.MonkeyPatch,
                                                        wrong_time: float) -> None:
    """A wrong candidate slower than the default, or slower than a right one, is never run
    against the reference (checking costs a run, a copy of every buffer and a comparison)."""
    monkeypatch.setattr(timing, "measure", FakeTimer({4: 1.0, 2: wrong_time, 8: 0.5}))
    checked: list[int] = []
    check = autotune._check

    def counting(problem: Any, i: int, *args: Any) -> Any:
        checked.append(i)
        return check(problem, i, *args)

    monkeypatch.setattr(autotune, "_check", counting)
    (result,) = tune([_problem(wrong=1)], CPU)
    assert result.choice == 2 and not result.rejected and checked == [2]


def test_a_candidate_that_fails_to_run_is_discarded(fresh: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(timing, "measure", FakeTimer({4: 1.0, 3: 0.1, 8: 0.5}))
    bad = _candidate(3, 64)  # tl.arange over 3 elements: not a power of two
    problem = _problem()
    problem = TuningProblem((problem.candidates[0], bad, problem.candidates[2]), problem.numels, (1,), COLS)
    (result,) = tune([problem], CPU)
    assert result.choice == 2 and set(result.rejected) == {1}


def test_results_are_cached_in_memory_and_on_disk(fresh: None, cache_dir: object,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    timer = FakeTimer({4: 1.0, 2: 0.4, 8: 0.5})
    monkeypatch.setattr(timing, "measure", timer)
    problem = _problem()
    assert tune([problem], CPU)[0].choice == 1 and len(timer.calls) == 3
    timer.by_xblock = {4: 0.1, 2: 1.0, 8: 1.0}  # a new timing would choose the default
    again = tune([problem], CPU)[0]
    assert (again.choice, again.origin, len(timer.calls)) == (1, "memo", 3)
    autotune.clear_memo()
    from_disk = tune([problem], CPU)[0]
    assert (from_disk.choice, from_disk.origin, len(timer.calls)) == (1, "disk", 3)
    assert from_disk.times_ms == (1.0, 0.4, 0.5)
    # other sizes are another problem
    assert tune([_problem(rows=ROWS + 1)], CPU)[0].origin == "tuned"


def _renamed(problem: TuningProblem, name: str) -> TuningProblem:
    """The same kernel called `name`, its first line a comment naming other FX nodes (as coil's
    kernels in each layer of a model do)."""
    comment = f"# kernel {name}: fused FX nodes add_{name[-1]}, sum_{name[-1]}\n"
    cands = tuple(Candidate(KernelSpec(name, comment + c.spec.source.replace("rowsum_xr", name),
                                       c.spec.args, c.spec.constexprs), c.grid) for c in problem.candidates)
    return TuningProblem(cands, problem.numels, problem.outputs, problem.reduction_length)


def test_the_same_kernel_under_another_name_is_tuned_once(fresh: None, monkeypatch: pytest.MonkeyPatch) -> None:
    timer = FakeTimer({4: 1.0, 2: 0.4, 8: 0.5})
    monkeypatch.setattr(timing, "measure", timer)
    layers = [_renamed(_problem(), f"rowsum_layer{i}") for i in range(3)]
    other = _renamed(_problem(rows=ROWS + 1), "rowsum_layer3")  # other sizes: its own problem
    results = tune([*layers, other], CPU)
    assert [r.origin for r in results] == ["tuned", "memo", "memo", "tuned"]
    assert [r.choice for r in results] == [1, 1, 1, 1] and len(timer.calls) == 6
    assert len({autotune.problem_key(p, CPU) for p in layers}) == 1
    # a name is only a name: a kernel whose body differs is another problem
    assert autotune.problem_key(_problem(wrong=1), CPU) != autotune.problem_key(_problem(), CPU)
    autotune.clear_memo()
    from_disk = tune([_renamed(_problem(), "rowsum_layer9")], CPU)[0]  # stored under layer0's name
    assert (from_disk.origin, from_disk.choice, len(timer.calls)) == ("disk", 1, 6)


@pytest.mark.parametrize("damage", ["truncate", "edit", "bogus_choice"])
def test_a_damaged_cache_entry_is_rebuilt(fresh: None, cache_dir: object, monkeypatch: pytest.MonkeyPatch,
                                          damage: str) -> None:
    timer = FakeTimer({4: 1.0, 2: 0.4, 8: 0.5})
    monkeypatch.setattr(timing, "measure", timer)
    problem = _problem()
    tune([problem], CPU)
    key = autotune.problem_key(problem, CPU)
    path = disk_cache.blob_path(autotune.knobs.cache_dir, autotune.NAMESPACE, key)
    text = path.read_text()
    if damage == "truncate":
        path.write_text(text[: len(text) // 2])
    elif damage == "edit":
        path.write_text(text.replace('"choice": 1', '"choice": 2'))  # the checksum no longer matches
    else:  # a well-formed blob whose content does not describe this problem
        disk_cache.write_blob(path, key, text.split("\n", 1)[1].replace('"choice": 1', '"choice": 7'))
    autotune.clear_memo()
    result = tune([problem], CPU)[0]
    assert (result.origin, result.choice, len(timer.calls)) == ("tuned", 1, 6)
    stored = disk_cache.read_blob(path, key)
    assert stored is not None and '"choice": 1' in stored


def test_tuning_uses_real_tensors_inside_a_fake_mode(fresh: None, monkeypatch: pytest.MonkeyPatch) -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    monkeypatch.setattr(timing, "measure", FakeTimer({4: 1.0, 2: 0.5, 8: 0.9}))
    with FakeTensorMode():
        (result,) = tune([_problem()], CPU)
    assert (result.origin, result.choice) == ("tuned", 1)


def test_the_real_timer_runs_interpreted_kernels(fresh: None) -> None:
    (result,) = tune([_problem()], CPU)
    assert result.origin == "tuned" and all(t is not None and t > 0 for t in result.times_ms)


def test_synthetic_arguments_are_seeded_and_leave_the_global_rng_alone() -> None:
    i64, b = TensorArg(torch.int64), TensorArg(torch.bool)
    spec = KernelSpec("k", "x", (TensorArg(torch.bfloat16), i64, b, 7), {})
    problem = TuningProblem((Candidate(spec, (1,)),), (5, 3, 2), (0,))
    state = torch.get_rng_state()
    a, c = autotune.make_arguments(problem, CPU), autotune.make_arguments(problem, CPU)
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.equal(a[0], c[0]) and a[0].dtype == torch.bfloat16 and a[0].std() > 0.1  # type: ignore[union-attr]
    assert a[1].tolist() == [0, 0, 0] and a[2].tolist() == [False, False] and a[3] == 7  # type: ignore[union-attr]


def test_tolerance_and_matches() -> None:
    assert autotune.tolerance(torch.bfloat16, 1) > autotune.tolerance(torch.float32, 1)
    assert autotune.tolerance(torch.float32, 1 << 20) > autotune.tolerance(torch.float32, 16)
    x = torch.randn(100)
    assert autotune.matches(x + 1e-7, x, 16) is None
    assert "1 of 100" in str(autotune.matches(torch.cat([x[:99], x[99:] + 1]), x, 16))
    assert autotune.matches(torch.tensor([float("nan")]), torch.tensor([float("nan")]), 1) is None
    assert autotune.matches(torch.tensor([1, 2]), torch.tensor([1, 3]), 1) is not None


def test_a_float32_result_rounded_through_bfloat16_may_differ_by_one_of_its_ulps() -> None:
    """A kernel that handles bfloat16 values (a sum cast to bfloat16 inside, then a float32
    result): two summation orders may round one element to neighbouring bfloat16 values, at any
    magnitude; that is agreement. A 5 % error is not, and a float32-only kernel keeps its tight
    tolerance."""
    want = torch.tensor([1000.0, 0.400390625, -3.0])  # each a bfloat16 value
    got = torch.tensor([1004.0, 0.40234375, -3.0])  # the first two one bfloat16 ulp up
    assert torch.equal(got.to(torch.bfloat16).float(), got)
    assert autotune.matches(got, want, 4096, torch.bfloat16) is None
    assert autotune.matches(got, want, 4096) is not None  # without the bfloat16 rounding: differs
    assert autotune.matches(want * 1.05, want, 4096, torch.bfloat16) is not None
    assert autotune.tolerance(torch.float32, 1, torch.float32) == autotune.tolerance(torch.float32, 1)


def test_the_rounding_type_is_the_coarsest_float_the_kernel_handles() -> None:
    src = "import triton\n\n@triton.jit\ndef k(a, b, c, n):\n    pass\n"
    spec = KernelSpec("k", src, (TensorArg(torch.float32), TensorArg(torch.bfloat16), TensorArg(torch.int64), 4))
    problem = autotune.TuningProblem((autotune.Candidate(spec, (1, 1, 1)),), (8, 8, 8), (0,))
    assert autotune.coarsest_float(problem) == torch.bfloat16
    only_ints = KernelSpec("k", src, (TensorArg(torch.int64),))
    assert autotune.coarsest_float(autotune.TuningProblem((autotune.Candidate(only_ints, (1, 1, 1)),), (8,), (0,))) is None


def test_problems_are_validated() -> None:
    c = _candidate(4, 64)
    with pytest.raises(ValueError, match="buffer sizes"):
        TuningProblem((c,), (1,), (0,))
    with pytest.raises(ValueError, match="out of range"):
        TuningProblem((c,), (1, 1), (2,))
    other = Candidate(KernelSpec("other", SOURCE, c.spec.args, dict(c.spec.constexprs)), c.grid)
    with pytest.raises(ValueError, match="differ"):
        TuningProblem((c, other), (1, 1), (1,))


def test_a_timer_failure_drops_that_candidate_or_leaves_the_kernel_untuned(
        fresh: None, monkeypatch: pytest.MonkeyPatch) -> None:
    def failing(bad: int) -> Callable[..., float]:
        def measure(kernel: Any, grid: tuple[int, ...], args: Sequence[object]) -> float:
            if kernel.spec.constexprs["XBLOCK"] == bad:
                raise RuntimeError("timer broke")
            return {4: 1.0, 2: 0.5, 8: 0.9}[kernel.spec.constexprs["XBLOCK"]]
        return measure

    monkeypatch.setattr(timing, "measure", failing(2))
    (result,) = tune([_problem()], CPU)
    assert (result.origin, result.choice) == ("tuned", 2) and "timing" in result.rejected[1]
    monkeypatch.setattr(timing, "measure", failing(4))  # the default
    (result,) = tune([_problem(rows=ROWS + 2)], CPU)
    assert (result.origin, result.choice) == ("untuned", 0)
    assert tune([_problem(rows=ROWS + 2)], CPU)[0].origin == "untuned"  # nothing was cached


def test_measure_call_times_any_callable_off_the_gpu() -> None:
    """`timing.measure_call` (an ATen call a generated kernel competes with): off a CUDA device,
    the wall-clock median of a few calls after one warm-up call."""
    import time

    from coil.runtime import timing

    calls: list[int] = []

    def work() -> None:
        calls.append(1)
        time.sleep(0.002)

    ms = timing.measure_call(work, torch.device("cpu"))
    assert len(calls) == 1 + timing.INTERPRETED_REPS
    assert 2.0 <= ms < 200.0
