"""Per-row loads of a reduction kernel are issued before its reductions (KernelWriter.prefetch):
cross-entropy's per-row loss in its row kernel, run under Triton's interpreter against eager."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from coil.triton_codegen import KernelConfig


@pytest.fixture(params=[1, 2], ids=["one_row", "two_rows"])
def rows(request, monkeypatch, tk):
    """Persistent kernels with 1 or 2 rows per program (XBLOCK); looped ones as chosen."""
    tk.reshape_configs(monkeypatch, "persistent",
                       lambda c: KernelConfig("persistent", request.param, c.rblock, c.num_warps))


# a float max reduction's call (KernelWriter.final): tl.reduce with the NaN-propagating combine
ROW_MAX = "_coil_max_nan)"


def _row_kernel_lines(sources) -> list[str]:
    (ks,) = [s for s in sources if ROW_MAX in s.source]  # the kernel of the rows' max and sum
    return ks.source.splitlines()


def _per_row_loads(lines: list[str]) -> list[int]:
    """Lines of loads that do not walk the row (the target's index, the gathered logit)."""
    return [i for i, line in enumerate(lines) if "tl.load(" in line and "rd0" not in line]


def _first(lines: list[str], needle: str) -> int:
    return next(i for i, line in enumerate(lines) if needle in line)


def test_cross_entropy_loads_target_and_logit_before_the_row_reductions(tk, rows):
    def fn(x, t):
        return (F.cross_entropy(x, t, reduction="none"), F.cross_entropy(x, t, ignore_index=2))

    torch.manual_seed(0)
    x, t = torch.randn(6, 10), torch.tensor([0, 9, 2, 5, 2, 1])
    x[3, 5] = float("inf")  # a row whose loss is NaN, as eager's
    sources = []
    tk.check(fn, x, t, strategy="persistent", sources=sources, rtol=1e-5, atol=1e-5)
    lines = _row_kernel_lines(sources)
    early = _per_row_loads(lines)
    # the target's index and each loss's gathered logit (the second's index clamps ignore_index)
    assert len(early) == 3, lines
    # both after the row's own load, both before its first reduction
    assert _first(lines, "rd0 +") < early[0] and max(early) < _first(lines, ROW_MAX), lines


def test_a_looped_kernel_issues_the_gather_before_its_loop(tk):
    def fn(x, t):
        return (F.cross_entropy(x, t, reduction="none"),)

    torch.manual_seed(1)
    x, t = torch.randn(5, 11), torch.tensor([10, 0, 3, 3, 7])
    sources = []
    tk.check(fn, x, t, strategy="looped", sources=sources, rtol=1e-5, atol=1e-5)
    lines = _row_kernel_lines(sources)
    early = _per_row_loads(lines)
    assert len(early) == 2 and max(early) < _first(lines, "for roffset"), lines


def test_a_per_row_value_of_reduced_results_stays_after_them(tk, rows):
    """A per-row member that needs a reduction's result (x - max of its row, gathered) is not
    moved: only its loads of inputs are."""

    def fn(x, t, b):
        m = x.amax(1, keepdim=True)
        return ((x - m).gather(1, t[:, None]) * b[:, None],)

    x, t, b = torch.randn(4, 9), torch.tensor([8, 0, 4, 4]), torch.randn(4)
    sources = []
    tk.check(fn, x, t, b, strategy="persistent", sources=sources)
    lines = _row_kernel_lines(sources)
    early = _per_row_loads(lines)
    assert len(early) == 3 and max(early) < _first(lines, ROW_MAX), lines  # t, b, x[row, t]
    sub = [i for i, line in enumerate(lines) if " - tmp" in line]
    assert sub and min(sub) > _first(lines, ROW_MAX), lines
