"""The split-reduction rule (coil.lowering_ir.ops.reductions): which reductions become partials
plus a reduction of the partials, how the chunks are cut, and what the split IR computes (the
brute-force evaluator of conftest.py against eager float64)."""

from __future__ import annotations

import coil.lowering_ir as L
import pytest
import torch
from coil.knobs import knobs

META = torch.device("meta")  # GPU-scale shapes: lowering reads only sizes and strides


def _reductions(g):
    return [(tuple(int(s) for s in op.ranges), tuple(int(s) for s in op.reduction_ranges))
            for op in g.operations if isinstance(op, L.Reduction)]


def _var_mean(t):
    return tuple(torch.var_mean(t, (0, 2, 3)))


def _image(*shape, channels_last=False, device=META, dtype=torch.bfloat16):
    x = torch.empty(*shape, device=device, dtype=dtype) if device == META else torch.randn(*shape, dtype=dtype)
    return x.to(memory_format=torch.channels_last) if channels_last else x


def test_sum_over_dim0_of_a_wide_matrix_splits_chunk_major(ir):
    # 8192 contiguous outputs: 128 programs of 64 outputs, too few; 8 chunks of 2048 rows (the
    # most that keep 128 x S programs within SPLIT_TARGET_PROGRAMS)
    g = ir.lower(lambda t: (t.sum(0),), torch.empty(16384, 8192, device=META, dtype=torch.bfloat16))
    assert _reductions(g) == [((8, 8192), (2048,)), ((8192,), (8,))]


def test_enough_outputs_or_short_rows_do_not_split(ir):
    assert len(_reductions(ir.lower(lambda t: (t.sum(1),), torch.empty(16384, 8192, device=META)))) == 1
    # 2048 channels of 7x7 images, NCHW: 2048 programs already
    assert len(_reductions(ir.lower(_var_mean, _image(32, 2048, 7, 7)))) == 2
    # inner rows below 2 x SPLIT_MIN_CHUNKS x the chunk floor (8192): one kernel
    assert len(_reductions(ir.lower(lambda t: (t.sum(1),), torch.empty(8, 8000, device=META)))) == 1
    # little data in all
    assert len(_reductions(ir.lower(lambda t: (t.sum(),), torch.empty(4096, device=META)))) == 1


def test_batch_norm_statistics_split_along_memory_order(ir):
    # NCHW: W is contiguous and reduced (inner): one row per channel, 256 < 264 programs;
    # chunks cut N into 8 pieces of 4, partials laid out [C, chunks]
    nchw = _reductions(ir.lower(_var_mean, _image(32, 256, 56, 56)))
    assert nchw == [((256, 8), (4, 56, 56))] * 2 + [((256,), (8,))] * 2
    # channels-last: C is contiguous and kept (outer): 4 programs of 64 channels. var_mean's
    # partials take the least chunk count reaching the target, 512: all of N, then H cut into 14
    # pieces of 4; partials [N, H-pieces, C]
    cl = _reductions(ir.lower(_var_mean, _image(32, 256, 56, 56, channels_last=True)))
    assert cl == [((32, 14, 256), (4, 56))] * 2 + [((256,), (32, 14))] * 2
    # a sum over the same dims takes the most staying within it, 256: N, then H in 8 pieces of 7
    cl_sum = _reductions(ir.lower(lambda t: (t.sum((0, 2, 3)),), _image(32, 256, 56, 56, channels_last=True)))
    assert cl_sum == [((32, 8, 256), (7, 56)), ((256,), (32, 8))]


def test_a_cut_dim_takes_whole_pieces_when_a_divisor_is_near(ir):
    # channels-last [64, 512, 7, 7], var_mean: 8 programs want 98 chunks; N gives 64 and no
    # divisor of H = 7 is within a factor 2 of the 2 still wanted: N alone, no ragged H piece
    cl = _reductions(ir.lower(_var_mean, _image(64, 512, 7, 7, channels_last=True)))
    assert cl == [((64, 512), (7, 7))] * 2 + [((512,), (64,))] * 2
    # a sum over [16, 256, 12, 12]: 84 wanted, N gives 16, 6 more: H = 12 in 6 pieces of 2
    even = _reductions(ir.lower(lambda t: (t.sum((0, 2, 3)),), _image(16, 256, 12, 12, channels_last=True)))
    assert even == [((16, 6, 256), (2, 12)), ((256,), (16, 6))]
    # H = 13 has no divisor near 6: ragged pieces of 3 (the last one short, masked)
    ragged = _reductions(ir.lower(lambda t: (t.sum((0, 2, 3)),), _image(16, 256, 13, 13, channels_last=True)))
    assert ragged == [((16, 5, 256), (3, 13)), ((256,), (16, 5))]


def test_knob_lowers_and_raises_the_threshold(ir, monkeypatch):
    monkeypatch.setenv("COIL_SPLIT_REDUCTION_MIN", str(1 << 40))
    assert len(_reductions(ir.lower(lambda t: (t.sum(0),), torch.empty(16384, 8192, device=META)))) == 1
    monkeypatch.setenv("COIL_SPLIT_REDUCTION_MIN", "16")
    assert len(_reductions(ir.lower(lambda t: (t.sum(1),), torch.randn(3, 50)))) == 2
    monkeypatch.setenv("COIL_SPLIT_REDUCTION_MIN", "many")
    with pytest.raises(ValueError, match="COIL_SPLIT_REDUCTION_MIN"):
        _ = knobs.split_reduction_min


def test_arg_reductions_and_max_with_indices_never_split(ir, monkeypatch):
    monkeypatch.setenv("COIL_SPLIT_REDUCTION_MIN", "16")
    x = torch.randn(3, 50)
    g = ir.lower(lambda t: (t.argmax(1), *t.max(1)), x)
    assert len(_reductions(g)) == 3
    ir.assert_same(ir.evaluate(g, [x]), [x.argmax(1), *x.max(1)])


SMALL = {
    # forced split (COIL_SPLIT_REDUCTION_MIN=16) on sizes no chunk width divides
    "sum_dim0": (lambda t: (t.sum(0),), (37, 5), False),
    "sum_dim1_keepdim": (lambda t: (t.sum(1, keepdim=True),), (3, 47), False),
    "mean_023_channels_last": (lambda t: (t.mean((0, 2, 3)),), (3, 2, 5, 7), True),
    "var_mean_nchw": (_var_mean, (3, 2, 5, 7), False),
    "var_mean_channels_last": (_var_mean, (3, 2, 5, 7), True),
    "std_correction0": (lambda t: (torch.std(t, 0, correction=0),), (47, 3), False),
    "amax_amin_prod": (lambda t: (t.amax(0), t.amin(0), (t * 0.1 + 1).prod(0)), (47, 3), False),
}


@pytest.mark.parametrize("case", sorted(SMALL))
def test_split_ir_computes_what_eager_does(ir, monkeypatch, case):
    monkeypatch.setenv("COIL_SPLIT_REDUCTION_MIN", "16")
    fn, shape, cl = SMALL[case]
    torch.manual_seed(0)
    x = _image(*shape, channels_last=cl, device=torch.device("cpu"), dtype=torch.float32)
    g = ir.lower(fn, x)
    # the partials: a reduction with more outputs than any result has
    assert max(torch.Size(r).numel() for r, _ in _reductions(g)) > max(w.numel() for w in fn(x))
    want = [w.float() for w in fn(x.double())]
    ir.assert_same(ir.evaluate(g, [x]), want, rtol=1e-5, atol=1e-5)


# -- the rule's machine facts (SplitRule) -------------------------------------------------------------

DEFAULT_CASES = [
    (lambda t: (t.sum(0),), (16384, 8192), False),
    (lambda t: (t.sum(1),), (16384, 8192), False),
    (_var_mean, (32, 256, 56, 56), False),
    (_var_mean, (32, 256, 56, 56), True),
    (lambda t: (t.sum((0, 2, 3)),), (32, 256, 56, 56), True),
    (lambda t: (t.amax(0),), (4096, 512), False),
]


def test_the_default_rule_is_a_132_sm_gpu_with_64_outputs_per_outer_program(ir):
    """Callers without a device get SplitRule(): the splits of the cases above are those of an
    explicit SplitRule(132, 64)."""
    rule = L.SplitRule()
    assert (rule.sm_count, rule.outer_rows, rule.min_programs, rule.target_programs) == (132, 64, 264, 1056)
    for fn, shape, cl in DEFAULT_CASES:
        x = _image(*shape, channels_last=cl)
        assert _reductions(L.lower(ir.trace(fn, x), split=L.SplitRule(132, 64))) == _reductions(ir.lower(fn, x))


def test_the_sm_count_and_outer_rows_decide_the_split(ir):
    x = torch.empty(16384, 8192, device=META, dtype=torch.bfloat16)
    gm = ir.trace(lambda t: (t.sum(0),), x)
    # 128 programs of 64 outputs fill a 32-SM GPU (64 programs wanted): no split
    assert len(_reductions(L.lower(gm, split=L.SplitRule(sm_count=32)))) == 1
    # a 264-SM GPU: the most chunks keeping 128 x S programs within 8 x 264, 16
    assert _reductions(L.lower(gm, split=L.SplitRule(sm_count=264))) == [((16, 8192), (1024,)), ((8192,), (16,))]
    # 8 outputs a program: 1024 programs fill the default GPU
    assert len(_reductions(L.lower(gm, split=L.SplitRule(outer_rows=8)))) == 1


def test_a_rule_needs_positive_counts():
    for bad in ({"sm_count": 0}, {"outer_rows": -1}, {"sm_count": 1.5}):
        with pytest.raises(ValueError, match="must be an int >= 1"):
            L.SplitRule(**bad)
