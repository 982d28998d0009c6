"""A looped kernel's centred sum of squares accumulates in its mean's loop (online.py, "online
variance"): layer norm, var_mean and batch-norm statistics read each row once fewer. Run under
Triton's interpreter against float64 eager, over rows of several loop steps (the last one partial
or not), rows far from zero (where a sum of squares minus a squared sum would lose every digit)
and special values."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from coil.scheduler import KernelGroup
from coil.triton_codegen.online import online_variances

INF, NAN = float("inf"), float("nan")




def _fp64_close(fn, *args, sources=None, strategy="looped", rtol=1e-5, atol=1e-5, tk=None):
    """fn's outputs under coil (float32) against fn in float64 eager."""
    got = tk.run(fn, *args, strategy=strategy, sources=sources)
    want = fn(*(a.double() if a.is_floating_point() else a for a in args))
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g.double(), w.double(), rtol=rtol, atol=atol, equal_nan=True)


def test_layer_norm_and_var_mean_take_one_loop_fewer(tk, steps):
    torch.manual_seed(0)
    x, w, b = torch.randn(6, 37), torch.randn(37), torch.randn(37)
    sources: list = []
    _fp64_close(lambda x, w, b: (F.layer_norm(x, (37,), w, b),), x, w, b, sources=sources, tk=tk)
    (ks,) = sources
    assert tk.loops(ks.source) == 2 and "_mean = tl.where(" in ks.source  # statistics, then the output
    sources = []
    _fp64_close(lambda x: tuple(torch.var_mean(x, 1, correction=1)), x, sources=sources, tk=tk)
    (ks,) = sources
    assert tk.loops(ks.source) == 1


def test_rows_far_from_zero_keep_their_variance(tk, steps):
    """Rows around 1e4 with unit spread (fp32 holds ~3 decimals after the point there): the
    centred statistics stay right where sum(x^2) - sum(x)^2 / n would cancel to noise."""
    torch.manual_seed(1)
    x = 1e4 + torch.randn(5, 37)
    _fp64_close(lambda x: (torch.var(x, 1), torch.std(x, 1, correction=0)), x, tk=tk, rtol=1e-3, atol=1e-3)
    want = torch.var(x.double(), 1)
    got = tk.run(lambda x: (torch.var(x, 1),), x, strategy="looped")[0]
    assert ((got.double() - want).abs() / want).max() < 1e-3


def test_special_values_match_eager(tk, steps):
    torch.manual_seed(2)
    x = torch.randn(6, 37) * 3
    x[0, 20] = NAN
    x[1, 3] = INF
    x[2, :] = 5.0  # a constant row: variance exactly 0
    x[3, 36] = 1e6  # one large value in the last step
    x[4, 0] = -1e6  # one large value in the first step
    # var and mean apart: eager's var_mean gives a NaN mean for the row with +inf (Welford's
    # inf - inf), torch.mean and coil (looped or persistent) give inf
    _fp64_close(lambda x: (torch.var(x, 1), torch.std(x, 1), x.mean(1)), x, tk=tk, rtol=1e-4, atol=1e-4)
    (var,) = tk.run(lambda x: (torch.var(x, 1),), x, strategy="looped")
    assert var[2] == 0.0


def test_rows_the_block_divides(tk, steps):
    """Rows of 64: the block (8 or 64) divides them, so every lane takes every step and the
    mean's update multiplies by the step's reciprocal (kernel.py variance_step) instead of
    dividing by each lane's count; rows far from zero and special values as above."""
    torch.manual_seed(4)
    x = torch.randn(6, 64) * 3
    x[0, 20] = NAN
    x[1, 63] = 1e6
    x[2, :] = -7.0
    x[3] += 1e4
    sources: list = []
    _fp64_close(lambda x: (torch.var(x, 1), torch.std(x, 1, correction=0)), x, sources=sources, tk=tk,
                rtol=1e-4, atol=1e-4)
    (ks,) = sources
    assert "roffset // RBLOCK" in ks.source
    (var,) = tk.run(lambda x: (torch.var(x, 1),), x, strategy="looped")
    assert var[2] == 0.0
    w, b = torch.randn(64), torch.randn(64)
    _fp64_close(lambda x, w, b: (F.layer_norm(x, (64,), w, b),), x[3:], w, b, tk=tk, rtol=1e-4, atol=1e-4)


def test_half_inputs(tk, steps):
    torch.manual_seed(3)
    x = (torch.randn(5, 37) * 4 + 2).to(torch.bfloat16)
    sources: list = []
    _fp64_close(lambda x: tuple(torch.var_mean(x.float(), 1)), x, sources=sources, tk=tk)
    assert any("_mean = tl.where(" in s.source for s in sources)


def test_the_outer_tiling_takes_one_loop(tk, steps):
    """Batch-norm statistics over a channels-last image (the "outer" tiling, strided along r):
    paired too, one loop over the rows, eager's values, over 105 rows (the last step partial)
    and 64 (the block divides them: the reciprocal step)."""
    torch.manual_seed(4)
    for img in (torch.randn(3, 6, 5, 7), torch.randn(4, 6, 4, 4)):
        img = img.to(memory_format=torch.channels_last) * 2 + 1
        sources: list = []
        _fp64_close(lambda x: tuple(torch.var_mean(x, (0, 2, 3), correction=0)), img, sources=sources,
                    strategy="outer", tk=tk)
        assert sources and all("_mean = tl.where(" in s.source for s in sources)
        assert max(tk.loops(s.source) for s in sources) == 1


def test_only_the_centred_square_of_the_kernels_own_mean_is_paired(tk):
    """Not paired: a square around another value than the mean of the same values, or of values
    the kernel writes; paired: layer norm's."""
    def pairs(fn, *args):
        s = tk.schedule(fn, *args)
        return [len(online_variances(g)) for g in s.steps if isinstance(g, KernelGroup) and g.is_reduction]

    x, y = torch.randn(4, 37), torch.randn(4, 37)
    assert pairs(lambda x: (F.layer_norm(x, (37,)),), x) == [1]
    assert pairs(lambda x, y: (((y - x.mean(1, keepdim=True)) ** 2).sum(1),), x, y) == [0]
    assert pairs(lambda x: (((x - x.amax(1, keepdim=True)) ** 2).sum(1),), x) == [0]
    assert pairs(lambda x: (((x - x.mean(1, keepdim=True)) * 2).sum(1),), x) == [0]
