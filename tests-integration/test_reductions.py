"""Reductions: each strategy forced and checked, multi-reduction kernels, arg-reductions, scans."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
import torch
from coil.backend import COMPILED
from coil.knobs import knobs


def _strategies() -> list[str]:
    found: list[str] = []
    for s in COMPILED:
        for src in s.kernel_sources.values():
            m = re.search(r"# kernel \w+: (\w+);", src)
            assert m is not None, src[:200]
            found.append(m.group(1))
    return found


def _run(fn: Callable[..., object], *args: torch.Tensor, strategy: str = "auto") -> None:
    with knobs.override(fallback_on_error=False, reduction_strategy=strategy):
        out = torch.compile(fn, backend="coil")(*args)
    torch.testing.assert_close(out, fn(*args), equal_nan=True)
    assert [f for s in COMPILED for f in s.fallbacks] == []


def _softmax_and_sums(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return x.softmax(-1), x.sum(0), torch.var_mean(x, 1), x.amax(1)


@pytest.mark.parametrize("strategy", ["persistent", "looped", "outer"])
def test_forced_strategy_runs_and_is_the_one_generated(strategy: str, device: torch.device) -> None:
    _run(_softmax_and_sums, torch.randn(6, 300, device=device), strategy=strategy)
    kinds = _strategies()
    assert "pointwise" not in kinds or len(kinds) > 1
    assert {k for k in kinds if k != "pointwise"} == {strategy}, kinds


def test_auto_picks_looped_for_long_rows(monkeypatch: pytest.MonkeyPatch, device: torch.device) -> None:
    monkeypatch.setenv("COIL_SPLIT_REDUCTION_MIN", str(1 << 30))  # two rows this long would split
    # integer values: the sum is exact in any order (random floats made this test flaky)
    _run(lambda x: x.sum(1), torch.randint(-8, 8, (2, 1 << 15), device=device).float())
    assert _strategies() == ["looped"]


def test_strided_rows_tile_outer(monkeypatch: pytest.MonkeyPatch, device: torch.device) -> None:
    # sum over dim 0: x (dim 1) is contiguous, r strided. On CUDA "auto" tiles it "outer" (a
    # wide-x block looping over r), not one persistent column per program; the interpreter keeps
    # such rows persistent (no coalescing to gain); forced, "outer" runs on both
    monkeypatch.setenv("COIL_SPLIT_REDUCTION_MIN", str(1 << 30))  # 70 outputs would split
    exact = torch.randint(-8, 8, (2048, 70), device=device).float()  # sums exact in any order
    _run(lambda x: (x.sum(0), x.t().amax(1)), exact)
    assert set(_strategies()) == {"outer" if device.type == "cuda" else "persistent"}
    torch._dynamo.reset()
    COMPILED.clear()
    _run(lambda x: (x.sum(0), x.t().amax(1)), exact, strategy="outer")
    assert set(_strategies()) == {"outer"}
    torch._dynamo.reset()
    COMPILED.clear()
    _run(lambda x: x.sum(1), exact.t().contiguous())  # the contiguous dim reduced
    assert _strategies() == ["persistent"]


def test_split_reduction_makes_two_kernels(monkeypatch: pytest.MonkeyPatch, device: torch.device) -> None:
    monkeypatch.setenv("COIL_SPLIT_REDUCTION_MIN", "1000")
    # integer values: the sum is exact in any order (random floats failed eager's tolerance in
    # 2 of 12 runs here: a split sum of 5000 differs from eager's by a few ulp of the total)
    exact = torch.randint(-8, 8, (3, 5000), device=device).float()
    _run(lambda x: x.sum(1), exact)
    # the sum's FX node is computed by two kernels: partials over chunks of each row, then their sum
    origins = COMPILED[0].kernel_origins
    assert len(origins) == 2 and all(any(o.startswith("sum") for o in k) for k in origins), origins
    monkeypatch.setenv("COIL_SPLIT_REDUCTION_MIN", str(1 << 30))
    torch._dynamo.reset()
    COMPILED.clear()
    _run(lambda x: x.sum(1), exact)
    assert len(COMPILED[0].kernel_origins) == 1  # the same reduction, unsplit


def test_several_reductions_share_one_kernel(device: torch.device) -> None:
    # softmax: max and sum over the same rows, and the normalisation, in one kernel
    _run(lambda x: x.softmax(-1), torch.randn(4, 50, device=device))
    assert sum(s.kernels for s in COMPILED) == 1
    src = next(iter(COMPILED[0].kernel_sources.values()))
    assert "_coil_max_nan)" in src and "tl.sum(" in src  # the row max (one NaN-propagating tl.reduce) and the sum


@pytest.mark.parametrize("strategy", ["persistent", "looped", "outer"])
def test_arg_reductions(strategy: str, device: torch.device) -> None:
    x = torch.randn(5, 37, device=device)
    x[2] = 1.0  # ties: the first index wins, as in eager
    _run(lambda t: (t.argmax(1), t.argmin(0, keepdim=True), t.argmax(), t.max(1), t.min(dim=0)), x, strategy=strategy)


@pytest.mark.parametrize("strategy", ["persistent", "looped", "outer"])
def test_arg_reductions_take_the_first_nan(strategy: str, device: torch.device) -> None:
    # eager: NaN is the extreme of argmax and argmin alike, so an arg reduction returns the first
    # NaN's index, and an all-NaN row its first element (not the largest number's index, nor 2**31 - 1)
    x = torch.randn(5, 37, device=device)
    nan = float("nan")
    x[1, 20] = x[1, 9] = x[1, 30] = nan  # row 1: the first NaN (9) in a later loop step than 0
    x[3] = nan  # an all-NaN row
    x[:, 4] = nan  # an all-NaN column
    _run(lambda t: (t.argmax(1), t.argmin(1), t.argmin(0, keepdim=True), t.argmax(), t.max(1), t.min(dim=0)), x,
         strategy=strategy)


@pytest.mark.parametrize("strategy", ["persistent", "looped", "outer"])
def test_max_and_min_of_bools(strategy: str, device: torch.device) -> None:
    # values are any/all, indices the first True (max) or False (min), as eager; these ran
    # eagerly before (the OpInfo sweep's max.reduction_with_dim bool)
    x = torch.rand(5, 37, device=device) > 0.6
    x[1] = False  # an all-False row: max's index 0
    x[2] = True  # an all-True row: min's index 0
    x[:, 5] = True
    _run(lambda t: (t.max(1), t.min(dim=0, keepdim=True), t.max(), t.min(), t.amax(1)), x, strategy=strategy)


def test_scan_of_a_0d_tensor(device: torch.device) -> None:
    # the value itself, in the scan's dtype (int64 for integers and bools); it ran eagerly before
    # (the OpInfo sweep's cumsum samples)
    x = torch.tensor(2.5, device=device)
    _run(lambda t: (torch.cumsum(t, 0), torch.cumprod(t * 3, -1), torch.cumsum(t > 1, 0),
                    torch.cumsum(t.int(), 0, dtype=torch.float64)), x)


@pytest.mark.parametrize("strategy", ["persistent", "looped", "outer"])
def test_scans(strategy: str, device: torch.device) -> None:
    x = torch.randn(5, 37, device=device)
    _run(lambda t: (torch.cumsum(t * 2, 1) + 1, torch.cumsum(t, 0), torch.cumprod(t[:, :6], 1),
                    torch.cumsum((t > 0).int(), 1)), x, strategy=strategy)


def _close64(out: object, ref: object, dtype: torch.dtype) -> None:
    rtol, atol = (1e-5, 1e-5) if dtype == torch.float32 else (2**-7, 1e-2)
    flat_out, flat_ref = torch.utils._pytree.tree_leaves(out), torch.utils._pytree.tree_leaves(ref)
    assert len(flat_out) == len(flat_ref)
    for o, r in zip(flat_out, flat_ref, strict=True):
        assert o.dtype == dtype and o.shape == r.shape
        torch.testing.assert_close(o.double(), r.double(), rtol=rtol, atol=atol * max(1.0, float(r.abs().max())))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "channels_last"])
def test_split_batch_norm_statistics(monkeypatch: pytest.MonkeyPatch, device: torch.device, dtype: torch.dtype,
                                     channels_last: bool) -> None:
    # per-channel var_mean and sum over (N, H, W), forced to split: partial (count, mean, M2) per
    # chunk, combined by Chan's formula; checked against float64 eager
    monkeypatch.setenv("COIL_SPLIT_REDUCTION_MIN", "16")
    torch.manual_seed(0)
    x = (torch.randn(3, 5, 6, 7, device=device) * 2 + 3).to(dtype)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)

    def fn(t: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (*torch.var_mean(t, (0, 2, 3)), t.sum((0, 2, 3)), t.std((0, 2, 3), keepdim=True))

    with knobs.override(fallback_on_error=False):
        out = torch.compile(fn, backend="coil")(x)
    _close64(out, [r.to(dtype) for r in fn(x.double())], dtype)
    kernels = [k for s in COMPILED for k in s.kernel_origins]
    assert sum(any(o.startswith("var_mean") for o in k) for k in kernels) == 2, kernels  # partials, combine
    assert [f for s in COMPILED for f in s.fallbacks] == []


def test_split_batch_norm_training_step(monkeypatch: pytest.MonkeyPatch, device: torch.device) -> None:
    # BatchNorm2d forward and backward in training mode, channels-last: the statistics and the
    # backward's per-channel sums all split; gradients match eager
    monkeypatch.setenv("COIL_SPLIT_REDUCTION_MIN", "16")
    torch.manual_seed(1)
    bn = torch.nn.BatchNorm2d(5).to(device)
    x = torch.randn(3, 5, 6, 7, device=device).to(memory_format=torch.channels_last).requires_grad_()

    def step(m: torch.nn.Module, t: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = m(t)
        (y * y.detach().sin()).sum().backward()
        return y, t.grad, m.weight.grad, m.bias.grad

    ref_bn = torch.nn.BatchNorm2d(5).to(device)
    ref_bn.load_state_dict(bn.state_dict())
    x_ref = x.detach().clone().requires_grad_()
    want = step(ref_bn, x_ref)
    with knobs.override(fallback_on_error=False):
        got = step(torch.compile(bn, backend="coil"), x)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(bn.running_var, ref_bn.running_var)
    assert sum(s.kernels for s in COMPILED) >= 4


def test_looped_softmax_and_cross_entropy_are_online(device: torch.device) -> None:
    # rows longer than one loop step, forced looped: the online softmax (a row's sum of
    # exp(x - max) accumulated in the max's own loop) makes softmax two loops over each row and
    # cross-entropy one; rows with a NaN, a +inf, only -inf and a -inf prefix longer than a step
    # give eager's values (NaN where eager has NaN)
    torch.manual_seed(0)
    x = torch.randn(6, 5000, device=device) * 3
    x[0, 1234] = float("nan")
    x[1, -1] = float("inf")
    x[2] = float("-inf")
    x[3, :4500] = float("-inf")
    x[4, 0] = 1e4
    t = torch.randint(0, 5000, (6,), device=device)
    for fn, loops in ((lambda a, b: a.softmax(-1), 2), (lambda a, b: a.log_softmax(-1), 2),
                      (lambda a, b: torch.nn.functional.cross_entropy(a, b, reduction="none"), 1)):
        torch._dynamo.reset()
        COMPILED.clear()
        with knobs.override(fallback_on_error=False, reduction_strategy="looped"):
            out = torch.compile(fn, backend="coil")(x, t)
        torch.testing.assert_close(out, fn(x, t), equal_nan=True)
        (src,) = [s for c in COMPILED for s in c.kernel_sources.values() if "for roffset" in s]
        assert src.count("for roffset") == loops, src


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_looped_layer_norm_and_var_mean_are_online(dtype: torch.dtype, device: torch.device) -> None:
    # rows longer than one loop step, forced looped, far from zero: the online variance (the
    # centred sum of squares accumulated in the mean's own loop, Welford per lane) makes a layer
    # norm two loops over each row and var_mean one, with eager's values
    torch.manual_seed(0)
    x = (torch.randn(6, 5000, device=device) + 300.0).to(dtype)
    w, b = torch.randn(5000, device=device).to(dtype), torch.randn(5000, device=device).to(dtype)
    tol = {"rtol": 1e-4, "atol": 1e-4} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 2e-2}
    for fn, loops in ((lambda a, w, b: torch.nn.functional.layer_norm(a, (5000,), w, b), 2),
                      (lambda a, w, b: torch.var_mean(a.float() if a.dtype == torch.bfloat16 else a, 1), 1)):
        torch._dynamo.reset()
        COMPILED.clear()
        with knobs.override(fallback_on_error=False, reduction_strategy="looped"):
            out = torch.compile(fn, backend="coil")(x, w, b)
        want = fn(x.double(), w.double(), b.double()) if dtype == torch.float32 else fn(x, w, b)
        torch.testing.assert_close(out, want, check_dtype=False, **tol)
        (src,) = [s for c in COMPILED for s in c.kernel_sources.values() if "for roffset" in s]
        assert src.count("for roffset") == loops and "_mean = tl.where(" in src, src


@pytest.mark.parametrize("dim", [0, 1, 2])
def test_softmax_over_any_dim_is_one_kernel(dim: int, device: torch.device) -> None:
    # the reduction's x-then-r order is not the memory order of exp(x - max) and of the
    # division when the reduced dim is not the innermost: the scheduler orders those pointwise
    # members as the reductions visit memory (scheduler visit_order.py), so nothing is written
    # out between kernels
    _run(lambda x: (x.softmax(dim), x.log_softmax(dim)), torch.randn(4, 19, 33, device=device))
    assert sum(s.kernels for s in COMPILED) == 1, [k for s in COMPILED for k in s.kernel_sources]
    if dim != 2:  # COIL_FUSION_VISIT_ORDER=0: fusion without visit order, exp(x - max) written out
        torch._dynamo.reset()
        COMPILED.clear()
        with knobs.override(fusion_visit_order=False):
            _run(lambda x: x.softmax(dim), torch.randn(4, 19, 33, device=device))
        assert sum(s.kernels for s in COMPILED) > 1


def test_cpu_max_min_and_prod_skip_the_interpreters_element_by_element_fold(monkeypatch: pytest.MonkeyPatch) -> None:
    """On the CPU the generated kernels' NaN-propagating max and min and their product reduce
    with triton-codegen's combine helpers; coil.runtime.interpreter recognises those helpers by
    name and runs them through numpy. The two packages cannot import each other: this is where a
    renamed or added helper that the runtime does not know fails (NaN rows checked against eager)."""
    from triton.runtime.interpreter import ReduceOps

    def slow(*a: object, **k: object) -> object:
        raise AssertionError("the interpreter's element-by-element reduction ran")

    monkeypatch.setattr(ReduceOps, "generic_reduce", slow)
    torch.manual_seed(0)
    x = torch.rand(6, 300) + 0.5
    x[2, 7] = float("nan")
    with knobs.override(fallback_on_error=False):
        out = torch.compile(lambda x: (x.amax(1), x.amin(1), x.prod(1)), backend="coil")(x)
    torch.testing.assert_close(out, (x.amax(1), x.amin(1), x.prod(1)), equal_nan=True)
    sources = "".join(src for s in COMPILED for src in s.kernel_sources.values())
    assert all(f"{h})" in sources for h in ("_coil_max_nan", "_coil_min_nan", "_coil_mul")), sources[:400]
