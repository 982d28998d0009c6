"""A looped kernel's sum of exp(x - max(x)) accumulates in the max's own loop (online.py): softmax,
log-softmax and cross-entropy read each row once fewer, with eager's values, NaN and infinities
included; run under Triton's interpreter against eager, over rows of several loop steps."""

from __future__ import annotations

import torch
import torch.nn.functional as F

INF, NAN = float("inf"), float("nan")




def _kernel(sources, needle: str):
    (ks,) = [s for s in sources if needle in s.source]
    return ks


def test_softmax_takes_two_loops_and_cross_entropy_one(tk, steps):
    torch.manual_seed(0)
    x, t = torch.randn(6, 37) * 4, torch.tensor([0, 36, 5, 9, 2, 17])
    sources = []
    tk.check(lambda x: (torch.softmax(x, 1),), x, strategy="looped", sources=sources)
    assert tk.loops(_kernel(sources, "_coil_max_nan)").source) == 2  # max and sum, then the output
    sources = []
    tk.check(lambda x, t: (F.cross_entropy(x, t, reduction="none"),), x, t, strategy="looped", sources=sources)
    assert tk.loops(_kernel(sources, "_coil_max_nan)").source) == 1


def _special_rows() -> torch.Tensor:
    torch.manual_seed(1)
    x = torch.randn(9, 37) * 3
    x[0, 20] = NAN  # NaN after finite values
    x[1, 3] = INF  # +inf: eager's exp(inf - inf) is NaN
    x[2, :] = -INF  # a row of -inf: NaN in eager
    x[3, :30] = -INF  # a -inf prefix longer than a loop step, then finite values
    x[4, ::2] = -INF  # -inf in every other lane
    x[5, 36] = 80.0  # a large last value: the earlier sums are rescaled by exp(-80 - ...)
    x[6, 0] = 80.0  # a large first value: every later term is tiny
    x[7, :] = 5.0  # a constant row
    x[8, :36] = -INF  # one finite value, in the last loop step
    return x


def test_special_values_match_eager(tk, steps):
    x = _special_rows()
    t = torch.tensor([20, 3, 0, 31, 1, 36, 0, 7, 36])
    sources = []
    tk.check(lambda x, t: (torch.softmax(x, 1), torch.log_softmax(x, 1), F.cross_entropy(x, t, reduction="none")),
             x, t, strategy="looped", sources=sources)
    assert any("* tl.exp(acc_" in s.source for s in sources)  # the online update was taken


def test_half_inputs(tk, steps):
    torch.manual_seed(2)
    x = (torch.randn(5, 37) * 6).to(torch.bfloat16)
    x[1, 4] = NAN
    tk.check(lambda x: (torch.softmax(x, 1), torch.logsumexp(x.float(), 1)), x, strategy="looped",
             rtol=1e-2, atol=1e-2)


def test_a_sum_over_other_values_stays_in_its_own_loop(tk, steps):
    """exp(y - max(x)) with y != x is not paired (a term could overflow before the final max is
    known): two loops, eager's values."""
    torch.manual_seed(3)
    x, y = torch.randn(4, 37), torch.randn(4, 37) * 50

    def fn(x, y):
        return ((y - x.amax(1, keepdim=True)).exp().sum(1),)

    sources = []
    tk.check(fn, x, y, strategy="looped", sources=sources, rtol=1e-4)
    ks = _kernel(sources, "_coil_max_nan)")
    assert tk.loops(ks.source) == 2 and "* tl.exp(acc_" not in ks.source
