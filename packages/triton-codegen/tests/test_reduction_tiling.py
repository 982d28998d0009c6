"""Reduction tilings ("outer": wide x blocks over a strided r) and split reductions (lowering-ir
cuts a long reduction with few outputs into partials and their reduction), run under the Triton
interpreter against eager PyTorch in float64."""

from __future__ import annotations

import coil.triton_codegen.kernel as kernel_mod
import pytest
import sympy
import torch
from coil.lowering_ir.split_rule import DEFAULT_OUTER_ROWS
from coil.scheduler import KernelGroup
from coil.triton_codegen import KernelConfig, choose, config, generate
from coil.triton_codegen.tiling import x_contiguous_loads

TOL = {torch.float32: (1e-5, 1e-5), torch.bfloat16: (2**-7, 1e-3)}


def _shrink(monkeypatch, scale):
    """Blocks small enough that loops run several ragged iterations on these sizes."""
    real = kernel_mod.choose

    def choose_small(xnumel, rnumel, is_reduction, target, strategy="auto", x_contiguous=False):
        cfg = real(xnumel, rnumel, is_reduction, target, strategy, x_contiguous)
        if cfg.strategy == "looped":
            return KernelConfig("looped", 2 * scale, 4, cfg.num_warps)
        if cfg.strategy == "outer":
            return KernelConfig("outer", 4 * scale, 2 * scale, cfg.num_warps)
        if cfg.strategy == "persistent":
            return KernelConfig("persistent", 2 * scale, cfg.rblock, cfg.num_warps)
        return cfg

    monkeypatch.setattr(kernel_mod, "choose", choose_small)


@pytest.fixture
def tiny_blocks(monkeypatch):
    _shrink(monkeypatch, 1)


@pytest.fixture
def small_blocks(monkeypatch):
    _shrink(monkeypatch, 4)  # the split kernels have more outputs: fewer interpreted programs


def _check64(tk, fn, x, *, strategy="auto", sources=None, tol=None):
    """fn's results against fn over x in float64, cast back to each result's dtype."""
    got = tk.run(fn, x, strategy=strategy, sources=sources)
    want = fn(x.double())
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        if g.dtype == torch.bool or not g.dtype.is_floating_point:
            torch.testing.assert_close(g, w.to(g.dtype))
            continue
        rtol, atol = tol or TOL.get(g.dtype, TOL[torch.float32])
        assert g.shape == w.shape
        torch.testing.assert_close(g.double(), w, rtol=rtol, atol=atol * max(1.0, float(w.abs().max())) if w.numel() else atol,
                                   equal_nan=True)


def _image(shape, dtype, channels_last):
    x = torch.randn(*shape).to(dtype)
    return x.to(memory_format=torch.channels_last) if channels_last else x


SUMS = {
    "sum_dim0": (lambda x: (x.sum(0),), (37, 21), False),
    "sum_dim1": (lambda x: (x.sum(1),), (21, 37), False),
    "sum_023_nchw": (lambda x: (x.sum((0, 2, 3)),), (3, 5, 6, 7), False),
    "sum_023_channels_last": (lambda x: (x.sum((0, 2, 3)),), (3, 5, 6, 7), True),
}


# -- strategies ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("strategy", ["persistent", "looped", "outer"])
@pytest.mark.parametrize("case", sorted(SUMS))
def test_each_strategy_sums_like_eager(tk, tiny_blocks, no_split, case, strategy, dtype):
    fn, shape, cl = SUMS[case]
    torch.manual_seed(0)
    sources = []
    _check64(tk, fn, _image(shape, dtype, cl), strategy=strategy, sources=sources)
    assert [s.strategy for s in sources] == [strategy]


LONG = {"sum_dim0": (2048, 70), "sum_dim1": (70, 2048), "sum_023_nchw": (16, 70, 9, 9),
        "sum_023_channels_last": (16, 70, 9, 9)}


@pytest.mark.parametrize("case", sorted(SUMS))
def test_auto_tiles_wide_in_x_when_x_is_contiguous(tk, no_split, case):
    # rows over 64 elements: for CUDA a persistent block would be narrower than OUTER_XBLOCK in
    # x, so "auto" tiles the strided reductions "outer" and keeps the contiguous ones whole; the
    # interpreter keeps all of them persistent (no coalescing to gain, no run-time loop bounds)
    fn, _, cl = SUMS[case]
    x = _image(LONG[case], torch.float32, cl)
    s = tk.schedule(fn, x)
    (group,) = [st for st in s.steps if isinstance(st, KernelGroup)]
    strided = case in ("sum_dim0", "sum_023_channels_last")
    assert generate(group, s.graph.buffers(), "cuda").strategy == ("outer" if strided else "persistent")
    assert generate(group, s.graph.buffers(), "interpret").strategy == "persistent"


def test_x_contiguity_is_read_from_the_loads(tk):
    def groups(fn, x):
        s = tk.schedule(fn, x)
        return [st for st in s.steps if isinstance(st, KernelGroup) and st.is_reduction]

    x = torch.randn(40, 30)
    cl = torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last)
    (g,) = groups(lambda t: (t.sum(0),), x)
    assert x_contiguous_loads(g)
    (g,) = groups(lambda t: (t.sum(1),), x)
    assert not x_contiguous_loads(g)
    (g,) = groups(lambda t: (t.t().sum(1),), x)  # a transposed view: the same as sum(0)
    assert x_contiguous_loads(g)
    (g,) = groups(lambda t: (t.sum((0, 2, 3)),), cl)
    assert x_contiguous_loads(g)
    (g,) = groups(lambda t: (t.sum((0, 2, 3)),), cl.contiguous())
    assert not x_contiguous_loads(g)


def test_broadcast_row_values_do_not_vote_on_the_tiling(tk, no_split):
    """A log-softmax backward fused with the column sum of its result (a language model head's
    bias gradient: [tokens, vocab] logits, per-token max, log-sum-exp, scale and label): the
    matrix runs along x (the vocabulary), so the kernel tiles wide in x however many per-token
    vectors it also reads; it computes what eager does."""

    def head_grad(logits, m, lse, scale, label):
        vocab = torch.arange(logits.shape[1])
        g = torch.where(vocab[None, :] == label[:, None], -1.0, 0.0) * scale[:, None]
        d = g - torch.exp(logits - m[:, None] - lse[:, None]) * scale[:, None]
        return d, d.sum(0)

    def args(tokens, vocab):
        return (torch.randn(tokens, vocab), torch.randn(tokens), torch.randn(tokens), torch.rand(tokens),
                torch.randint(0, vocab, (tokens,)))

    s = tk.schedule(head_grad, *args(2048, 40))  # rows too long for a persistent block of 64 outputs
    (group,) = [st for st in s.steps if isinstance(st, KernelGroup) and st.is_reduction]
    assert x_contiguous_loads(group)
    assert generate(group, s.graph.buffers(), "cuda").strategy == "outer"
    torch.manual_seed(0)
    args = args(96, 80)
    got = tk.run(head_grad, *args, strategy="outer")
    for g, w in zip(got, head_grad(*(a.double() if a.is_floating_point() else a for a in args)), strict=True):
        torch.testing.assert_close(g.double(), w, rtol=1e-5, atol=1e-5)


def test_choose_outer_on_cuda():
    cfg = choose(8192, 16384, True, "cuda", x_contiguous=True)
    assert cfg == KernelConfig("outer", config.OUTER_XBLOCK, config.OUTER_RBLOCK, config.OUTER_WARPS)
    # short strided rows (a split's chunks) loop too, in OUTER_RBLOCK steps; rows of one step
    # are persistent, many outputs wide
    for rows in (config.OUTER_RBLOCK + 1, 32, 49, 64):
        short = choose(1 << 17, rows, True, "cuda", x_contiguous=True)
        assert short == KernelConfig("outer", config.OUTER_XBLOCK, config.OUTER_RBLOCK, config.OUTER_WARPS)
    one_step = choose(8192, config.OUTER_RBLOCK, True, "cuda", x_contiguous=True)
    assert one_step.strategy == "persistent" and one_step.rblock == config.OUTER_RBLOCK
    wide = choose(1 << 20, config.OUTER_RBLOCK, True, "cuda", x_contiguous=True)
    assert wide.strategy == "persistent" and wide.xblock == config.CUDA_BUDGET // config.OUTER_RBLOCK
    # a split's second kernel (few outputs, a few hundred strided partials each): one output per
    # program, persistent, rather than four programs looping
    combine = choose(256, 448, True, "cuda", x_contiguous=True)
    assert combine.strategy == "persistent" and combine.xblock == 1
    # long rows, few outputs: spread to one row per program
    assert choose(256, 1 << 16, True, "cuda").xblock == 1
    assert choose(16384, 1 << 16, True, "cuda").xblock == 4
    # contiguous rows are unchanged
    assert choose(8192, 16384, True, "cuda").strategy == "persistent"
    assert choose(8192, 1 << 15, True, "cuda").strategy == "looped"
    # few outputs: the x block shrinks to them and r grows to keep the tile
    few = choose(8, 1 << 15, True, "cuda", x_contiguous=True)
    assert few.strategy == "outer" and few.xblock == 8 and few.xblock * few.rblock == config.OUTER_XBLOCK * config.OUTER_RBLOCK
    assert choose(8, 8, True, "cuda", "outer").strategy == "outer"
    # the interpreter: "auto" never loops where a persistent block fits; forced "outer" works
    assert choose(8192, 16384, True, "interpret", x_contiguous=True).strategy == "persistent"
    assert choose(8192, 16384, True, "interpret", "outer").strategy == "outer"


def test_split_rule_and_codegen_agree_on_rows_per_program():
    assert config.OUTER_XBLOCK == DEFAULT_OUTER_ROWS  # the split rule's default for callers without codegen


def test_size_zero_reductions(tk, force_split):
    for strategy in ("auto", "persistent", "looped", "outer"):
        _check64(tk, lambda x: (x.sum(0), x.amax(1), x.mean(0)), torch.randn(0, 5), strategy=strategy)
        _check64(tk, lambda x: (x.sum(1), x.sum(0)), torch.randn(5, 0), strategy=strategy)
        _check64(tk, lambda x: tuple(torch.var_mean(x, 0)), torch.randn(0, 3), strategy=strategy)


# -- split reductions -------------------------------------------------------------------------------


def _reduction_sources(sources):
    return [s for s in sources if s.strategy != "pointwise"]


SPLITS = {
    # (fn, shape, channels_last, reduction kernels): sizes are not multiples of any block or chunk
    "sum_dim0": (lambda x: (x.sum(0),), (37, 21), False, 2),
    "sum_dim1": (lambda x: (x.sum(1),), (3, 101), False, 2),
    "sum_all": (lambda x: (x.sum(),), (13, 11), False, 2),
    "sum_023_nchw": (lambda x: (x.sum((0, 2, 3)),), (3, 5, 6, 7), False, 2),
    "sum_023_channels_last": (lambda x: (x.sum((0, 2, 3)),), (3, 5, 6, 7), True, 2),
    "mean_keepdim": (lambda x: (x.mean((0, 2), keepdim=True),), (5, 3, 7, 2), False, 2),
    "var_mean_nchw": (lambda x: tuple(torch.var_mean(x, (0, 2, 3))), (3, 5, 6, 7), False, 2),
    "var_mean_channels_last": (lambda x: tuple(torch.var_mean(x, (0, 2, 3))), (3, 5, 6, 7), True, 2),
    "var_mean_dim0_keepdim": (lambda x: tuple(torch.var_mean(x, 0, correction=0, keepdim=True)), (37, 21), False, 2),
    # std and var: their partial kernels (same input, same chunks) fuse into one, and their
    # finishing kernels, which read its two partials, fuse as siblings
    "std_var_dim1": (lambda x: (torch.std(x, 1), torch.var(x, 1, correction=0)), (3, 101), False, 2),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("case", sorted(SPLITS))
def test_split_reductions_match_float64(tk, force_split, case, dtype):
    fn, shape, cl, kernels = SPLITS[case]
    torch.manual_seed(2)
    x = _image(shape, dtype, cl)
    sources = []
    _check64(tk, fn, x, sources=sources)
    reds = _reduction_sources(sources)
    assert len(reds) == kernels, [s.origins for s in reds]


@pytest.mark.parametrize("strategy", ["persistent", "looped", "outer"])
@pytest.mark.parametrize("case", ["sum_dim0", "var_mean_channels_last", "var_mean_nchw", "std_var_dim1"])
def test_split_kernels_under_each_strategy(tk, small_blocks, force_split, case, strategy):
    fn, shape, cl, kernels = SPLITS[case]
    torch.manual_seed(3)
    sources = []
    _check64(tk, fn, _image(shape, torch.float32, cl), strategy=strategy, sources=sources)
    reds = _reduction_sources(sources)
    assert len(reds) == kernels and {s.strategy for s in reds} == {strategy}


def test_split_other_reduction_types(tk, force_split):
    torch.manual_seed(4)
    x = torch.randn(53, 6)
    x[17, 2] = float("nan")

    def fn(t):
        return (t.amax(0), t.amin(0), (t.abs() * 0.1 + 0.95).prod(0), (t > 2).any(0), (t > -2.5).all(0),
                (t * 10).to(torch.int32).sum(0))

    sources = []
    _check64(tk, fn, x, sources=sources, tol=(1e-4, 1e-5))
    reds = _reduction_sources(sources)
    for name in ("amax", "amin", "prod", "sum"):  # each computed by two kernels
        assert sum(any(o.startswith(name) for o in s.origins) for s in reds) == 2, name
    assert sum(any(o.startswith("any") for o in s.origins) for s in reds) >= 2  # all = not any(not)


def test_split_var_mean_is_stable_far_from_zero(tk, force_split):
    # mean 1e3, spread 1: sum-of-squares in float32 would lose the variance (x^2 ~ 1e6, its
    # float32 ulp 0.06 per element); the centred partials and Chan's combination keep it
    torch.manual_seed(5)
    x = 1e3 + torch.randn(2, 3, 9, 13, dtype=torch.float64)
    sources = []
    got = tk.run(lambda t: tuple(torch.var_mean(t, (0, 2, 3))), x.float(), sources=sources)
    assert len(_reduction_sources(sources)) == 2
    var, mean = torch.var_mean(x.float().double(), (0, 2, 3))  # of the data float32 holds
    torch.testing.assert_close(got[1].double(), mean, rtol=1e-6, atol=0)
    torch.testing.assert_close(got[0].double(), var, rtol=1e-4, atol=0)


def _partial_shapes(tk, fn, x):
    s = tk.schedule(fn, x)
    out = []
    for st in s.steps:
        if isinstance(st, KernelGroup) and st.is_reduction:
            out.append([int(sympy.sympify(d)) for d in (st.xnumel, st.rnumel)])
    return out


def test_split_chunks_follow_memory_order(tk, force_split):
    # channels-last: chunks are cut from N, then H (the outermost strides); x of the partial
    # kernel = chunks x channels, its r = the rest of H x W
    cl = torch.randn(3, 5, 6, 7).to(memory_format=torch.channels_last)
    shapes = _partial_shapes(tk, lambda t: (t.sum((0, 2, 3)),), cl)
    (x1, r1), (x2, r2) = shapes
    assert x1 % 5 == 0 and x1 * r1 >= 3 * 6 * 7 * 5 and x2 == 5 and r2 == x1 // 5
    nchw = _partial_shapes(tk, lambda t: (t.sum((0, 2, 3)),), cl.contiguous())
    (x1, r1), (x2, r2) = nchw
    assert x1 % 5 == 0 and x2 == 5 and r2 == x1 // 5


def test_split_knob_off_keeps_one_kernel(tk, monkeypatch):
    monkeypatch.setenv("COIL_SPLIT_REDUCTION_MIN", str(1 << 30))
    sources = []
    _check64(tk, lambda x: tuple(torch.var_mean(x, (0, 2, 3))), torch.randn(3, 5, 6, 7), sources=sources)
    assert len(_reduction_sources(sources)) == 1
