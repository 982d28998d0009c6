"""Autotuning candidates (`config.candidates`) and kernel variants (`variants`): the rules each
candidate set obeys, that a kernel's text does not depend on its block sizes or warps (so one
source serves every candidate), and that every variant of every reduction strategy computes what
eager PyTorch does (float64 reference), under the Triton interpreter."""

from __future__ import annotations

import itertools
import re

import coil.triton_codegen.kernel as kernel_mod
import pytest
import sympy
import torch
from coil.scheduler import KernelGroup
from coil.triton_codegen import (
    KernelConfig,
    KernelSource,
    candidates,
    choose,
    config,
    generate,
    variants,
)
from coil.triton_codegen.variants import default_config, with_config


def _pow2(n: int) -> bool:
    return n >= 1 and n & (n - 1) == 0


@pytest.mark.parametrize("target", ["cuda", "interpret"])
def test_candidate_sets_follow_the_rules(target):
    sizes = [1, 7, 64, 300, 8192, 1 << 20]
    for xnumel, rnumel, strategy, xc in itertools.product(sizes, sizes, config.STRATEGIES, (False, True)):
        default = choose(xnumel, rnumel, True, target, strategy, xc)
        cands = candidates(default, xnumel, rnumel, target)
        wide = len(config.WIDE_LOOPS) if default.strategy == "looped" and target == "cuda" else 0
        assert cands[0] == default and len(cands) <= config.MAX_CANDIDATES + wide
        assert len(set(cands)) == len(cands)
        budget = config.INTERP_BUDGET if target != "cuda" else config.CUDA_BUDGET
        for c in cands:
            assert c.strategy == default.strategy  # the source depends on the strategy only
            assert _pow2(c.xblock) and _pow2(c.rblock) and _pow2(c.num_warps) and c.num_warps <= config.MAX_WARPS
            assert c.xblock <= max(config.next_pow2(xnumel), default.xblock)
            assert c.xblock * c.rblock <= max(2 * budget, default.xblock * default.rblock)
            if c.strategy == "persistent":
                assert c.rblock == default.rblock and c.rblock >= rnumel  # still covers the row
            else:
                assert c.rblock <= max(config.next_pow2(rnumel), default.rblock)


def test_pointwise_candidates():
    """A CUDA pointwise kernel with the 1024-wide default is also timed at 512 / 4 and 512 / 8
    warps (config.POINTWISE_CANDIDATES); at 1024 / 4 (8 elements per thread, the Triton 3.6
    miscompile's shape) only with plain loads (PLAIN_POINTWISE_CANDIDATES); smaller kernels, and
    any under the interpreter, have none."""
    for n in (1, 100, 512):
        default = choose(n, 1, False, "cuda")
        assert candidates(default, n, 1, "cuda") == [default]
    for n in (1024, 5000, 1 << 27):
        default = choose(n, 1, False, "cuda")
        got = candidates(default, n, 1, "cuda")
        assert got == [default, KernelConfig("pointwise", 512, 1, 4), KernelConfig("pointwise", 512, 1, 8)]
        assert all(c.xblock // (32 * c.num_warps) != 8 for c in got)
        assert candidates(default, n, 1, "cuda", plain_loads=True) == [*got, KernelConfig("pointwise", 1024, 1, 4)]
        interp = choose(n, 1, False, "interpret")
        assert candidates(interp, n, 1, "interpret", plain_loads=True) == [interp]


def test_cuda_candidates_vary_what_the_brief_names():
    looped = choose(256, 1 << 15, True, "cuda")
    assert looped.strategy == "looped" and looped.rblock == 1024
    cands = candidates(looped, 256, 1 << 15, "cuda")
    assert {512, 1024, 2048} <= {c.rblock for c in cands} and len({c.xblock for c in cands}) > 1
    assert {(1, r, w) for r, w in config.WIDE_LOOPS} <= {(c.xblock, c.rblock, c.num_warps) for c in cands}
    persistent = choose(8192, 512, True, "cuda")
    cands = candidates(persistent, 8192, 512, "cuda")
    assert {persistent.xblock // 2, persistent.xblock * 2} <= {c.xblock for c in cands}
    assert len({c.num_warps for c in cands}) > 1
    outer = choose(8192, 16384, True, "cuda", x_contiguous=True)
    cands = candidates(outer, 8192, 16384, "cuda")
    assert outer.strategy == "outer" and len({(c.xblock, c.rblock) for c in cands}) >= 4


def _groups(tk, fn, x):
    s = tk.schedule(fn, x)
    return s, [st for st in s.steps if isinstance(st, KernelGroup) and st.is_reduction]


@pytest.mark.parametrize("target", ["cuda", "interpret"])
@pytest.mark.parametrize("strategy", ["persistent", "looped", "outer"])
def test_one_source_serves_every_candidate(tk, monkeypatch, no_combos, strategy, target):
    """Generating a kernel with any candidate's configuration gives the same text, and
    `with_config` gives the constexprs, warps and grid that generation gives."""
    s, groups = _groups(tk, lambda x: (x.softmax(-1), *torch.var_mean(x, 1), x.sum(0)), torch.randn(6, 300))
    bufs = s.graph.buffers()
    assert groups
    for g in groups:
        ks = generate(g, bufs, target, strategy)
        for cfg in candidates(default_config(ks), int(g.xnumel), int(g.rnumel), target)[1:]:
            monkeypatch.setattr(kernel_mod, "choose", lambda *a, cfg=cfg, **k: cfg)
            forced = generate(g, bufs, target, strategy)
            monkeypatch.undo()
            assert forced.source == ks.source
            v = with_config(ks, cfg)
            assert (v.constexprs, v.num_warps, sympy.simplify(v.grid - forced.grid)) == (
                forced.constexprs, forced.num_warps, 0)


def test_with_config_refuses_another_strategy(tk):
    s, (g,) = _groups(tk, lambda x: (x.sum(1),), torch.randn(4, 10))
    ks = generate(g, s.graph.buffers(), "interpret", "persistent")
    with pytest.raises(ValueError, match="looped"):
        with_config(ks, KernelConfig("looped", 1, 4, 4))


def test_scans_and_pointwise_variants(tk):
    s = tk.schedule(lambda x: (x.cumsum(1), x + 1), torch.randn(4, 10))
    bufs = s.graph.buffers()
    kinds = {}
    for st in s.steps:
        if isinstance(st, KernelGroup):
            ks = generate(st, bufs, "interpret")
            kinds[ks.strategy] = len(variants(ks, "interpret"))
    assert kinds["pointwise"] == 1 and kinds["persistent"] > 1


def test_pointwise_variants_on_cuda_match_eager(tk):
    """On CUDA a big pointwise kernel's variants are its source under POINTWISE_CANDIDATES
    (same text, other XBLOCK, warps and grid); each computes what eager does (here under the
    interpreter, over a size no block divides)."""
    fn = lambda x, y: (torch.sigmoid(x) * y - (x * y).abs(),)  # noqa: E731
    x, y = torch.randn(3, 1001), torch.randn(3, 1001)
    s = tk.schedule(fn, x, y)
    (g,) = [st for st in s.steps if isinstance(st, KernelGroup)]
    ks = generate(g, s.graph.buffers(), "cuda")
    vs = variants(ks, "cuda")
    assert ks.plain_loads
    assert [(v.constexprs["XBLOCK"], v.num_warps) for v in vs] == [(1024, 2), (512, 4), (512, 8), (1024, 4)]
    assert all(v.source == ks.source for v in vs)
    assert [int(sympy.sympify(v.grid)) for v in vs] == [3, 6, 6, 3]
    for xblock, warps in ((512, 4), (512, 8), (1024, 4)):
        cfg = KernelConfig("pointwise", xblock, 1, warps)
        (got,) = tk.run(fn, x, y, pick=lambda k, cfg=cfg: with_config(k, cfg))
        torch.testing.assert_close(got, fn(x, y)[0])


# -- every variant against eager -------------------------------------------------------------------


CASES = {
    # (fn, shape, strategies): sizes are not multiples of any block
    "softmax_var_mean": (lambda x: (x.softmax(-1), *torch.var_mean(x, 1)), (6, 300), ("persistent", "looped")),
    "sum_dim1": (lambda x: (x.sum(1), x.amax(1)), (5, 700), ("persistent", "looped")),
    "sum_dim0": (lambda x: (x.sum(0), x.argmax(0)), (300, 6), ("persistent", "looped", "outer")),
    "var_mean_nchw": (lambda x: tuple(torch.var_mean(x, (0, 2, 3))), (3, 5, 6, 7), ("auto", "outer")),
    "cumsum": (lambda x: (x.cumsum(1),), (5, 70), ("persistent", "looped")),
}


def _check_variants(tk, fn, x, strategy):
    want = fn(x.double())
    seen: list[list[KernelSource]] = []

    def run(k: int) -> None:
        def pick(ks: KernelSource) -> KernelSource:
            vs = variants(ks, "interpret")
            seen.append(vs)
            return vs[min(k, len(vs) - 1)]

        got = tk.run(fn, x, strategy=strategy, pick=pick)
        for g, w in zip(got, want, strict=True):
            if not g.dtype.is_floating_point:
                torch.testing.assert_close(g, w.to(g.dtype))
            else:
                torch.testing.assert_close(g.double(), w, rtol=1e-5, atol=1e-5 * max(1.0, float(w.abs().max())))

    run(0)
    most = max(len(vs) for vs in seen)
    assert most > 1, "no kernel had candidates"
    for k in range(1, most):
        run(k)


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_variant_matches_eager(tk, no_split, case):
    fn, shape, strategies = CASES[case]
    torch.manual_seed(0)
    x = torch.randn(*shape)
    for strategy in strategies:
        _check_variants(tk, fn, x, strategy)


def test_every_variant_of_a_split_reduction_matches_eager(tk, force_split):
    torch.manual_seed(0)
    fn = lambda x: (x.sum(1), *torch.var_mean(x, 1))  # noqa: E731
    _, groups = _groups(tk, fn, torch.randn(3, 101))
    assert len(groups) >= 2  # partials, then their reduction
    _check_variants(tk, fn, torch.randn(3, 101), "auto")



# -- across strategies: a persistent kernel's loop over r ------------------------------------------


def test_looped_alternatives_rules():
    from coil.triton_codegen import looped_alternatives

    persistent = KernelConfig("persistent", 1, 8192, 16)
    assert looped_alternatives(persistent, 16384, 8192, "cuda") == [
        KernelConfig("looped", 1, 2048, 16), KernelConfig("looped", 1, 4096, 16), KernelConfig("looped", 1, 2048, 8),
        KernelConfig("looped", 1, 8192, 16), KernelConfig("looped", 1, 4096, 32),
        KernelConfig("looped", 1, 8192, 32)]  # 8192: one block long, two passes over each row
    rows_4096 = looped_alternatives(KernelConfig("persistent", 1, 4096, 16), 16384, 4096, "cuda")
    assert [c.rblock for c in rows_4096] == [2048, 4096, 2048, 4096]  # no block longer than the row
    assert looped_alternatives(KernelConfig("persistent", 2, 2048, 16), 16384, 2048, "cuda") == []  # short rows
    assert looped_alternatives(persistent, 512, 8192, "cuda") == []  # few rows
    assert looped_alternatives(persistent, 16384, 8192, "interpret") == []
    assert looped_alternatives(KernelConfig("looped", 4, 1024, 8), 16384, 20000, "cuda") == []


def test_other_strategy_gives_interchangeable_loops(tk):
    from coil.triton_codegen import other_strategy

    s = tk.schedule(lambda x: (x.sum(1),), torch.randn(1024, 8192))
    bufs = s.graph.buffers()
    (group,) = [st for st in s.steps if isinstance(st, KernelGroup)]
    ks = generate(group, bufs, "cuda")
    assert ks.strategy == "persistent"
    loop = generate(group, bufs, "cuda", "looped")
    vs = other_strategy(ks, lambda: loop, "cuda")
    assert [(v.constexprs["XBLOCK"], v.constexprs["RBLOCK"], v.num_warps) for v in vs] == [
        (1, 2048, 16), (1, 4096, 16), (1, 2048, 8), (1, 8192, 16), (1, 4096, 32), (1, 8192, 32)]
    for v in vs:
        assert v.strategy == "looped" and v.source == loop.source and v.name == ks.name
        assert v.pointer_args == ks.pointer_args and v.size_args == ks.size_args
        assert sympy.sympify(v.grid) == 1024  # one row per program
    assert other_strategy(ks, lambda: ks, "cuda") == []  # not a loop
    assert other_strategy(loop, lambda: loop, "cuda") == []  # not a persistent kernel
    few_rows = tk.schedule(lambda x: (x.sum(1),), torch.randn(8, 8192))
    small = generate(next(st for st in few_rows.steps if isinstance(st, KernelGroup)), few_rows.graph.buffers(), "cuda")
    assert small.strategy == "persistent"

    def never() -> KernelSource:
        raise AssertionError("generated a loop for a kernel with no loop candidates")

    assert other_strategy(small, never, "cuda") == [] and other_strategy(ks, never, "interpret") == []


@pytest.mark.parametrize("rblock", [2048, 8192])
@pytest.mark.parametrize("case", ["sum_dim1", "softmax_var_mean"])
def test_a_loop_over_long_rows_one_row_per_program_matches_eager(tk, no_split, case, rblock):
    """The configurations `looped_alternatives` adds (XBLOCK 1, RBLOCK 2048; 8192: one block
    longer than the row), on rows that are not a multiple of the block, under the interpreter."""
    fn = CASES[case][0]
    torch.manual_seed(0)
    x = torch.randn(3, 5000)
    got = tk.run(fn, x, strategy="looped", pick=lambda ks: with_config(ks, KernelConfig("looped", 1, rblock, 4))
                 if ks.strategy == "looped" else ks)
    for g, w in zip(got, fn(x.double()), strict=True):
        if g.dtype.is_floating_point:
            torch.testing.assert_close(g.double(), w, rtol=1e-5, atol=1e-5 * max(1.0, float(w.abs().max())))
        else:
            torch.testing.assert_close(g, w.to(g.dtype))


def _ln(x, w, b):
    return (torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, 1e-5),)


def _residual_ln(x, y, w):
    s = x + y
    return s, torch.nn.functional.layer_norm(s, (s.shape[-1],), w, None, 1e-5)


def _rms(x, w):
    return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w,)


def _xent(x, t):
    return (torch.nn.functional.cross_entropy(x, t, reduction="none"),)


REREAD_CASES = {
    "layer_norm": (_ln, lambda: (torch.randn(6, 300), torch.randn(300), torch.randn(300))),
    "layer_norm_bf16": (_ln, lambda: (torch.randn(6, 300).bfloat16(), torch.randn(300).bfloat16(),
                                      torch.randn(300).bfloat16())),
    "residual_layer_norm": (_residual_ln, lambda: (torch.randn(5, 200), torch.randn(5, 200), torch.randn(200))),
    "rms_norm": (_rms, lambda: (torch.randn(7, 256), torch.randn(256))),
    "softmax": (lambda x: (x.softmax(-1),), lambda: (torch.randn(6, 300),)),
    "cross_entropy": (_xent, lambda: (torch.randn(6, 300), torch.randint(0, 300, (6,)))),
}


@pytest.mark.parametrize("case", sorted(REREAD_CASES))
def test_reading_rows_again_gives_the_same_bits(tk, no_split, case):
    """`generate(..., reread=True)`: a persistent kernel's part after its last reduction reads
    the row again instead of holding it in registers. Under the interpreter its outputs are the
    default kernel's, bit for bit, and match eager."""
    fn, make = REREAD_CASES[case]
    torch.manual_seed(0)
    args = make()
    srcs: list[KernelSource] = []
    sched = tk.schedule(fn, *args)
    groups = [st for st in sched.steps if isinstance(st, KernelGroup)]
    default = tk.run(fn, *args)
    again = tk.run(fn, *args, reread=True, sources=srcs)
    assert any(s.strategy == "persistent" for s in srcs)
    # every case but the cross-entropy (its last reduction's result is the output) reads again
    plain = [generate(g, sched.graph.buffers(), "interpret").source for g in groups]
    assert ([a.source for a in srcs] != plain) == (case != "cross_entropy"), case
    for d, a, w in zip(default, again, fn(*args), strict=True):
        assert torch.equal(d, a), case
        torch.testing.assert_close(a, w, rtol=2e-2 if w.dtype == torch.bfloat16 else 1e-5,
                                   atol=2e-2 if w.dtype == torch.bfloat16 else 1e-5)


def test_reread_text_and_alternative(tk):
    """The layer norm read again loads its input twice (evict_last first, evict_first after the
    reductions); a kernel with nothing after its reduction has no such variant
    (`reread_alternative` is empty: same text), nor has any kernel off CUDA."""
    from coil.triton_codegen import reread_alternative

    s = tk.schedule(_ln, *REREAD_CASES["layer_norm"][1]())
    bufs = s.graph.buffers()
    (group,) = [st for st in s.steps if isinstance(st, KernelGroup)]
    ks = generate(group, bufs, "cuda")
    again = generate(group, bufs, "cuda", reread=True)
    x = 0  # the input is the first pointer the kernel reads
    loads_x = re.findall(rf"tl\.load\(ptr{x} \+ [^\n]*", again.source)
    assert len(loads_x) == 2, again.source
    assert "evict_last" in loads_x[0] and "evict_first" in loads_x[1]
    assert len(re.findall(rf"tl\.load\(ptr{x} \+ ", ks.source)) == 1
    (alt,) = reread_alternative(ks, lambda: again, "cuda")
    assert alt.source == again.source and default_config(alt) == default_config(ks)
    assert reread_alternative(ks, lambda: again, "interpret") == []
    assert reread_alternative(ks, lambda: ks, "cuda") == []  # the same text: nothing to gain
    plain = tk.schedule(lambda t: (t.sum(1),), torch.randn(6, 300))
    (pg,) = [st for st in plain.steps if isinstance(st, KernelGroup)]
    pbufs = plain.graph.buffers()
    assert generate(pg, pbufs, "cuda", reread=True).source == generate(pg, pbufs, "cuda").source


def test_plain_loads_are_floating_affine_and_unmasked_by_data(tk):
    """KernelSource.plain_loads (which offers 1024 / 4 to the tuner) holds for floating loads at
    affine indices; a gather, an integer load, a load under a mask computed from data (a
    constant-padded shift) or a scatter clears it."""
    x, i = torch.randn(8, 64), torch.randint(0, 8, (8, 64))

    def plain(fn, *args):
        s = tk.schedule(fn, *args)
        (g,) = [st for st in s.steps if isinstance(st, KernelGroup)]
        return generate(g, s.graph.buffers(), "cuda").plain_loads

    assert plain(lambda a: (torch.sigmoid(a) * 2 - a.abs(),), x)
    assert plain(lambda a: (a.to(torch.bfloat16) * 2,), x)
    assert not plain(lambda a, j: (torch.gather(a, 0, j) * 2,), x, i)
    assert not plain(lambda j: (j * 2,), i)
    assert not plain(lambda a: (torch.nn.functional.pad(a, (1, 1)) * 2,), x)
    from coil.lowering_ir import Scatter
    from coil.scheduler import scatter_groups

    s = tk.schedule(lambda a, j: (torch.index_put(a, (j[0],), a[0], accumulate=True),), x, i)
    (op,) = [st for st in s.steps if isinstance(st, Scatter)]
    init, scatter = (generate(g, s.graph.buffers(), "cuda") for g in scatter_groups(op))
    assert init.plain_loads and not scatter.plain_loads
