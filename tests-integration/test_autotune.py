"""Autotuning end to end (COIL_AUTOTUNE=always: the Triton interpreter on the CPU, with a timer the
tests control): the compiled model matches eager with the configuration the timer favoured, a
candidate computing other values is rejected with a warning, a second compile benchmarks nothing
(tuning cache, then graph cache), and a damaged tuning-cache entry is rebuilt."""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import coil.backend.pipeline.autotune as backend_autotune
import pytest
import torch
from coil.backend import COMPILED, GraphStats
from coil.knobs import knobs
from coil.runtime import autotune, timing
from coil.scheduler import fusion
from coil.triton_codegen import KernelConfig, KernelSource


class Timer:
    """Stands in for coil.runtime.timing.measure: `score(spec)` milliseconds; records each call
    as (kernel name, configuration, time), the default of each kernel first."""

    def __init__(self, score: Callable[[Any], float]) -> None:
        self.score = score
        self.seen: list[tuple[str, str, float]] = []

    def __call__(self, kernel: Any, grid: tuple[int, ...], args: Sequence[object]) -> float:
        t = self.score(kernel.spec)
        self.seen.append((kernel.name, autotune.Candidate(kernel.spec, grid).describe(), t))
        return t

    def expected(self) -> dict[str, str]:
        """The configuration the rule must keep per kernel: the fastest, if it beats the default
        (timed first) by more than the margin."""
        out: dict[str, str] = {}
        for name in dict.fromkeys(n for n, _, _ in self.seen):
            timed = [(t, cfg) for n, cfg, t in self.seen if n == name]
            best = min(timed)
            out[name] = best[1] if best[0] < (1 - autotune.SWITCH_MARGIN) * timed[0][0] else timed[0][1]
        return out


def small_blocks_fast(spec: Any) -> float:
    """Smaller XBLOCK, then smaller RBLOCK, then fewer warps is faster: never the interpreter's
    default (its blocks are as big as the budget allows)."""
    c = spec.constexprs
    return 1.0 + c["XBLOCK"] + c.get("RBLOCK", 1) / 1e4 + spec.num_warps / 1e6


@pytest.fixture(autouse=True)
def _no_combos(monkeypatch: pytest.MonkeyPatch) -> None:
    """The small reductions these tests tune with a lowered byte threshold would otherwise join
    combo kernels (coil.scheduler.combo), which are not tuned."""
    monkeypatch.setattr(fusion, "COMBO_MAX_PARTS", 1)


@pytest.fixture
def tuning(monkeypatch: pytest.MonkeyPatch) -> Iterator[Timer]:
    timer = Timer(small_blocks_fast)
    monkeypatch.setattr(timing, "measure", timer)
    autotune.clear_memo()
    with knobs.override(autotune="always", autotune_min_bytes=0, autotune_extra_min_bytes=0, fallback_on_error=False):
        yield timer
    autotune.clear_memo()


def _model(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return x.softmax(-1), x.sum(0), *torch.var_mean(x, 1)


def _compile_and_check(fn: Callable[..., Any], *args: torch.Tensor) -> GraphStats:
    out = torch.compile(fn, backend="coil")(*args)
    torch.testing.assert_close(out, fn(*args))
    (stats,) = [s for s in COMPILED if s.eager_fallback is None]
    return stats


def _choices(stats: GraphStats) -> dict[str, str]:
    return {k: v.removesuffix(" (default)") for k, v in stats.autotune_choices.items()}


def test_the_favoured_configuration_is_compiled_and_matches_eager(tuning: Timer, device: torch.device,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    x = torch.randn(6, 300, device=device)
    with knobs.override(logs="autotune"), caplog.at_level(logging.INFO, logger="coil.autotune"):
        stats = _compile_and_check(_model, x)
    assert stats.autotuned >= 1 and stats.autotune_switched >= 1 and stats.autotune_cached == 0
    assert _choices(stats) == tuning.expected()
    assert "autotune" in stats.stage_times
    # the wrapper launches each switched kernel over the grid of its chosen XBLOCK
    for name, cfg in _choices(stats).items():
        chosen = re.search(r"grid=\((\d+), 1, 1\)", cfg)
        launched = re.search(rf"k_{name}\(\((\d+), 1, 1, \)", stats.wrapper_source)
        assert chosen is not None and launched is not None and chosen.group(1) == launched.group(1), (name, cfg)
    log = "\n".join(r.getMessage() for r in caplog.records if r.name == "coil.autotune")
    assert "<- chosen" in log and all(name in log for name in stats.autotune_choices)


def test_dynamic_shapes_tune_at_the_hints_and_stay_correct(tuning: Timer, device: torch.device) -> None:
    fn = torch.compile(lambda x: (x.sum(1), x.amax(1)), backend="coil", dynamic=True)
    for shape in ((5, 300), (9, 300), (5, 700)):
        x = torch.randn(*shape, device=device)
        torch.testing.assert_close(fn(x), (x.sum(1), x.amax(1)))
    assert sum(s.autotune_switched for s in COMPILED) >= 1 and len(COMPILED) == 1


def test_a_candidate_computing_other_values_is_rejected(tuning: Timer, device: torch.device,
                                                       monkeypatch: pytest.MonkeyPatch,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    real = backend_autotune.variants

    def with_a_wrong_one(ks: KernelSource, target: str, hints: Any = None) -> list[KernelSource]:
        vs = real(ks, target, hints)
        if len(vs) < 2 or "tl.sum(" not in ks.source:
            return vs
        wrong = dataclasses.replace(vs[1], source=ks.source.replace("tl.sum(", "1.001 * tl.sum("))
        return [*vs, wrong]

    monkeypatch.setattr(backend_autotune, "variants", with_a_wrong_one)
    tuning.score = lambda spec: 0.5 if "1.001 * tl.sum(" in spec.source else 1.0  # the wrong one is "fastest"
    x = torch.randn(7, 50, device=device)
    with caplog.at_level(logging.WARNING, logger="coil.runtime"):
        stats = _compile_and_check(lambda t: t.sum(1), x)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    (name,) = stats.autotune_choices
    assert len(warnings) == 1 and name in warnings[0] and "computes other values" in warnings[0]
    assert stats.autotune_switched == 0 and all("1.001" not in cfg for _, cfg, _ in tuning.seen)


def test_a_persistent_kernel_can_be_tuned_into_a_loop(tuning: Timer, device: torch.device,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Across strategies: a persistent reduction's group generated again as a loop over r
    (`triton_codegen.other_strategy`; on CUDA only for long rows, here for any row) is among the
    candidates; when it is the fastest, the wrapper launches the loop, one row per program, and
    the result matches eager."""
    import sys

    variants_mod = sys.modules["coil.triton_codegen.variants"]  # the package attribute is the function
    monkeypatch.setattr(variants_mod, "looped_alternatives",
                        lambda default, xnumel, rnumel, target: [KernelConfig("looped", 1, 64, 2)])
    tuning.score = lambda spec: 0.5 if "for roffset in range(0, " in spec.source else 1.0
    x = torch.randn(9, 300, device=device)
    stats = _compile_and_check(lambda t: (t.sum(1), *torch.var_mean(t, 1)), x)
    looped = {k: v for k, v in _choices(stats).items() if "RBLOCK=64 XBLOCK=1 warps=2" in v}
    assert looped and stats.autotune_switched >= 1, _choices(stats)
    for name in looped:
        assert re.search(rf"k_{name}\(\(9, 1, 1, \)", stats.wrapper_source), name  # one row per program


def test_a_persistent_kernel_can_be_tuned_to_read_its_rows_again(tuning: Timer, device: torch.device,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A persistent kernel's group generated to read its rows again after its last reduction
    (`triton_codegen.reread_alternative`; on CUDA only, here under the interpreter too) is among
    the candidates at the default configuration; when it is the fastest, the compiled graph runs
    it and matches eager."""
    real = backend_autotune.reread_alternative
    monkeypatch.setattr(backend_autotune, "reread_alternative", lambda ks, make, target: real(ks, make, "cuda"))
    timed: list[str] = []

    def score(spec: Any) -> float:
        timed.append(spec.source)
        return 0.5 if "evict_first" in spec.source else 1.0

    tuning.score = score
    x, w = torch.randn(9, 300, device=device), torch.randn(300, device=device)
    stats = _compile_and_check(lambda t, g: torch.nn.functional.layer_norm(t, (300,), g), x, w)
    assert stats.autotune_switched >= 1, _choices(stats)
    again = [src for src in timed if "evict_first" in src]
    assert again and all(src.count("tl.load(ptr0 + ") == 2 for src in again), again


def test_a_big_pointwise_kernel_is_tuned(tuning: Timer, device: torch.device,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """On CUDA a pointwise kernel's 1024-wide default is timed beside config.POINTWISE_CANDIDATES
    (here under the interpreter too); the faster one is launched over its own grid and the
    result matches eager."""
    import sys

    variants_mod = sys.modules["coil.triton_codegen.variants"]
    real = variants_mod.candidates
    monkeypatch.setattr(variants_mod, "candidates", lambda default, x, r, target, plain=False: real(
        KernelConfig("pointwise", 1024, 1, 2) if default.strategy == "pointwise" else default, x, r, "cuda", plain))
    x, y = torch.randn(3, 1001, device=device), torch.randn(3, 1001, device=device)
    stats = _compile_and_check(lambda a, b: torch.sigmoid(a) * b - (a * b).abs(), x, y)
    (name, cfg), = _choices(stats).items()
    assert stats.autotune_switched == 1 and cfg.startswith("XBLOCK=512 warps=4"), cfg  # the timer favours small blocks
    assert re.search(rf"k_{name}\(\(6, 1, 1, \)", stats.wrapper_source), stats.wrapper_source


def test_the_extra_candidates_wait_for_their_own_threshold(tuning: Timer, device: torch.device,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Below COIL_AUTOTUNE_EXTRA_MIN_BYTES a pointwise kernel is not tuned and a persistent one is
    timed without its read-again variant (its other candidates still are)."""
    import sys

    variants_mod = sys.modules["coil.triton_codegen.variants"]
    real_candidates, real_reread = variants_mod.candidates, backend_autotune.reread_alternative
    monkeypatch.setattr(variants_mod, "candidates", lambda default, x, r, target, plain=False: real_candidates(
        KernelConfig("pointwise", 1024, 1, 2) if default.strategy == "pointwise" else default, x, r, "cuda", plain))
    monkeypatch.setattr(backend_autotune, "reread_alternative", lambda ks, make, target: real_reread(ks, make, "cuda"))
    timed: list[str] = []
    tuning.score = lambda spec: timed.append(spec.source) or 1.0
    x, w, y = torch.randn(9, 300, device=device), torch.randn(300, device=device), torch.randn(3, 1001, device=device)

    def fn(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return torch.sigmoid(c) * c, torch.nn.functional.layer_norm(a, (300,), b)

    for extra_min, reread, pointwise in ((1 << 40, False, False), (0, True, True)):
        timed.clear()
        COMPILED.clear()
        torch._dynamo.reset()
        autotune.clear_memo()
        with knobs.override(autotune_extra_min_bytes=extra_min):
            stats = _compile_and_check(fn, x, w, y)
        assert stats.autotuned >= 1 and timed  # the layer norm's own candidates at least
        assert any("evict_first" in src for src in timed) == reread, extra_min
        assert any("RBLOCK" not in src for src in timed) == pointwise, extra_min


def _tuning_blobs(cache: Path) -> list[Path]:
    return sorted((cache / autotune.NAMESPACE).rglob("*.blob"))


def test_a_second_compile_benchmarks_nothing(tuning: Timer, device: torch.device) -> None:
    x = torch.randn(6, 300, device=device)
    with knobs.override(graph_cache=False):
        first = _compile_and_check(_model, x)
        timed = len(tuning.seen)
        assert timed > 0 and first.autotune_cached == 0
        for clear in (False, True):  # the in-process memo, then the disk cache
            if clear:
                autotune.clear_memo()
            torch._dynamo.reset()
            COMPILED.clear()
            again = _compile_and_check(_model, x)
            assert len(tuning.seen) == timed  # no timing
            assert again.autotune_cached == again.autotuned == first.autotuned
            assert again.autotune_choices == first.autotune_choices
            assert again.wrapper_source.split("\n", 1)[1] == first.wrapper_source.split("\n", 1)[1]


def test_a_damaged_tuning_entry_is_rebuilt(tuning: Timer, device: torch.device) -> None:
    cache = Path(str(autotune.knobs.cache_dir))
    x = torch.randn(6, 300, device=device)
    with knobs.override(graph_cache=False):
        first = _compile_and_check(_model, x)
        blobs = _tuning_blobs(cache)
        assert len(blobs) == first.autotuned
        good = {p: p.read_bytes() for p in blobs}
        for p in blobs:
            p.write_bytes(good[p][:-5] + b"XXXXX")  # payload edited: the checksum fails
        autotune.clear_memo()
        torch._dynamo.reset()
        COMPILED.clear()
        timed = len(tuning.seen)
        again = _compile_and_check(_model, x)
    assert len(tuning.seen) > timed and again.autotune_cached == 0  # tuned again
    assert again.autotune_choices == first.autotune_choices
    assert {p: p.read_bytes() for p in _tuning_blobs(cache)}.keys() == good.keys()
    for p in blobs:  # rewritten whole: the checksum holds again
        assert p.read_bytes() != good[p][:-5] + b"XXXXX" and autotune.disk_cache.read_blob(p, p.stem) is not None


def test_the_graph_cache_stores_the_tuned_wrapper(tuning: Timer, device: torch.device,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COIL_AOT_CACHE", "0")  # the graph cache alone
    x = torch.randn(6, 300, device=device)
    first = _compile_and_check(_model, x)
    assert first.graph_cache == "miss" and first.autotune_switched >= 1
    timed = len(tuning.seen)
    autotune.clear_memo()
    for p in _tuning_blobs(Path(str(autotune.knobs.cache_dir))):
        p.unlink()  # no tuning cache left: only the graph cache can avoid timing
    torch._dynamo.reset()
    COMPILED.clear()
    hit = _compile_and_check(_model, x)
    assert hit.graph_cache == "hit" and len(tuning.seen) == timed
    assert hit.autotune_choices == first.autotune_choices
    assert hit.wrapper_source.split("\n", 1)[1] == first.wrapper_source.split("\n", 1)[1]


def test_kernels_below_the_byte_threshold_are_not_tuned(tuning: Timer, device: torch.device) -> None:
    """COIL_AUTOTUNE_MIN_BYTES: of two row sums, only the one over the large input (720 000 bytes
    read, against 7 200) is tuned; no candidate of the small one is compiled or timed."""
    x, y = torch.randn(6, 300, device=device), torch.randn(600, 300, device=device)
    with knobs.override(autotune_min_bytes=100_000):
        stats = _compile_and_check(lambda a, b: (a.sum(1), b.sum(1)), x, y)
    assert stats.autotuned == 1 and len(stats.autotune_choices) == 1
    assert len({name for name, _, _ in tuning.seen}) == 1


def test_autotune_is_off_by_default_under_the_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    timer = Timer(small_blocks_fast)
    monkeypatch.setattr(timing, "measure", timer)
    with knobs.override(fallback_on_error=False):
        stats = _compile_and_check(_model, torch.randn(6, 300))
    assert stats.autotuned == 0 and timer.seen == [] and "autotune" not in stats.stage_times
    assert not backend_autotune.enabled(torch.device("cpu"))


def test_the_aot_cache_entry_holds_the_tuned_specs(tuning: Timer, device: torch.device) -> None:
    """What torch's AOTAutograd cache would pickle (CoilOutputCode) carries the tuned wrapper and
    specs: loading it (as a warm process does) times nothing and launches the chosen configs."""
    from coil.backend.caches import aot_cache, graph_cache
    from coil.backend.pipeline.compile import compile_for_aot_cache, load_portable
    from coil.lowering_ir import decomposition_table
    from torch.fx.experimental.proxy_tensor import make_fx

    x = torch.randn(6, 300, device=device)
    gm = make_fx(_model, decomposition_table=decomposition_table(), tracing_mode="fake")(x)
    code = compile_for_aot_cache(gm, [x], kind="inference")
    (stats,) = COMPILED
    assert stats.autotune_switched >= 1 and code.graph is not None
    entry = graph_cache.parse(code.graph.text, aot_cache.ENTRY_KEY)
    specs = {s.name: s for s in entry.specs}
    for name, cfg in _choices(stats).items():
        spec = specs[name]
        assert autotune.Candidate(spec, ()).describe().removesuffix(" grid=()") in cfg, (name, cfg)
    timed = len(tuning.seen)
    autotune.clear_memo()
    call = load_portable("inference", entry, code.graph.constants)
    torch.testing.assert_close(tuple(call([x])), _model(x))
    assert len(tuning.seen) == timed


def test_a_failure_of_tuning_itself_keeps_the_defaults(tuning: Timer, device: torch.device,
                                                       monkeypatch: pytest.MonkeyPatch,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    def out_of_memory(*args: object, **kwargs: object) -> None:
        raise RuntimeError("CUDA out of memory (a stand-in)")

    monkeypatch.setattr(backend_autotune, "tune", out_of_memory)
    with caplog.at_level(logging.WARNING, logger="coil.backend"):
        stats = _compile_and_check(_model, torch.randn(6, 300, device=device))
    assert stats.autotuned == 0 and stats.eager_fallback is None and tuning.seen == []
    assert any("keeping the default launch configurations" in r.getMessage() for r in caplog.records)
