"""Combo kernels (combo.py): a coil.scheduler ComboGroup's parts in one launch, run on the
interpreter against eager PyTorch."""

from __future__ import annotations

import pytest
import torch
from coil.scheduler import ComboGroup
from coil.triton_codegen import generate
from coil.triton_codegen.kernel import kernel_config


def _casts_and_scales(a, b, c, d):
    """Four independent pointwise results over different spaces (sizes no block divides; one a
    transposed read)."""
    return a.to(torch.bfloat16), b * 2 + 1, c.t().contiguous().to(torch.float16), d.exp()


def _inputs():
    torch.manual_seed(0)
    return torch.randn(7), torch.randn(70000), torch.randn(33, 5), torch.randn(3, 1, 4)


def test_a_combo_computes_each_part(tk):
    sources = []
    tk.check(_casts_and_scales, *_inputs(), sources=sources)
    (ks,) = sources
    assert ks.strategy == "combo" and ks.size_args == () and ks.constexprs == {}
    # the programs of every part, each at its own block size
    (combo,) = tk.schedule(_casts_and_scales, *_inputs()).kernels()
    assert isinstance(combo, ComboGroup)
    blocks = [kernel_config(p, "interpret", "auto").xblock for p in combo.parts]
    assert sorted(int(p.xnumel) for p in combo.parts) == [7, 12, 165, 70000]
    assert int(ks.grid) > len(blocks)  # a part of several programs, counted from its range's start
    assert int(ks.grid) == sum(-(-int(p.xnumel) // b) for p, b in zip(combo.parts, blocks, strict=True))
    assert ks.source.count("tl.program_id(0)") == 1
    assert ks.source.count("@triton.jit\ndef " + ks.name + "_p") == 4


def test_a_combo_of_small_reductions_and_a_cast_computes_each_part(tk):
    """Sums over either dim, a max and a cast (a backward's bias gradients and their casts), each
    part with its own block sizes, in one kernel."""
    def fn(a, b, c, w):
        return a.sum(0), b.float().sum(1), c.amax(0), w.to(torch.bfloat16)

    torch.manual_seed(0)
    args = (torch.randn(300, 40), torch.randn(12, 700, dtype=torch.bfloat16), torch.randn(33, 3), torch.randn(70))
    sources = []
    tk.check(fn, *args, sources=sources, rtol=1e-4, atol=1e-4)
    (ks,) = sources
    assert ks.strategy == "combo" and ks.source.count("RBLOCK=") == 3


def test_gradient_casts_after_products_run_as_one_combo(tk):
    def step(x, w1, w2):
        h = torch.relu(x @ w1.to(torch.bfloat16))
        return (x.t() @ h).float(), (h.t() @ (h @ w2.to(torch.bfloat16))).float()

    torch.manual_seed(0)
    x, w1, w2 = torch.randn(8, 16, dtype=torch.bfloat16), torch.randn(16, 12), torch.randn(12, 12)
    sources = []
    tk.check(step, x, w1, w2, sources=sources, rtol=2e-2, atol=2e-2)
    assert [ks.strategy for ks in sources].count("combo") == 2


def test_a_combo_takes_no_table_of_addresses(tk):
    s = tk.schedule(_casts_and_scales, *_inputs())
    (combo,) = s.kernels()
    assert isinstance(combo, ComboGroup)
    bufs = s.graph.buffers()
    with pytest.raises(ValueError, match="combo kernel"):
        generate(combo, bufs, "interpret", indirect={combo.parts[0].ops[0].reads()[0]: (0, torch.float32)},
                 table="table")
