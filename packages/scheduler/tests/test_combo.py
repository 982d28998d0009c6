"""Combo kernels (coil.scheduler.combo): which independent small groups the scheduler runs as
one launch, and which it keeps apart. What the combos compute is checked by triton-codegen's
tests (test_combo.py there) and end to end by tests-integration/test_combo_kernels.py."""

from __future__ import annotations

import pytest
import sympy
import torch
from coil.scheduler import COMBO_MAX_PARTS, ComboGroup
from coil.scheduler.combo import combine


def _casts(*ws):
    """Each parameter cast to bfloat16 (an autocast forward's first kernels)."""
    return tuple(w.to(torch.bfloat16) for w in ws)


def _combos(s) -> list[ComboGroup]:
    return [k for k in s.kernels() if isinstance(k, ComboGroup)]


def test_casts_of_inputs_of_different_sizes_are_one_combo(sch):
    ws = [torch.randn(n) for n in (7, 64, 300)] + [torch.randn(5, 9)]
    s = sch.schedule(_casts, *ws)
    sch.check_topological(s)
    sch.check_groups(s)
    (combo,) = s.kernels()
    assert isinstance(combo, ComboGroup) and len(combo.parts) == 4
    assert sorted(int(p.xnumel) for p in combo.parts) == [7, 45, 64, 300]
    assert [p.name for p in combo.parts] == [f"{combo.name}_p{i}" for i in range(4)]
    assert sorted(combo.stores) == sorted(st for p in combo.parts for st in p.stores)


def test_a_large_cast_of_an_input_joins_no_combo(sch):
    """A cast writing more than COMBO_MAX_EARLY_BYTES stays a kernel at its own place (run
    ahead, its buffer would split the allocator's segments); the small casts around it still
    form one combo."""
    from coil.scheduler.combo import COMBO_MAX_EARLY_BYTES

    big = torch.randn(COMBO_MAX_EARLY_BYTES // 2 + 512)  # bf16: 1 KiB more than the bound
    s = sch.schedule(_casts, torch.randn(7), big, torch.randn(64))
    sch.check_topological(s)
    (combo,) = _combos(s)
    assert sorted(int(p.xnumel) for p in combo.parts) == [7, 64]
    assert [int(k.xnumel) for k in s.kernels() if k is not combo] == [big.numel()]


def test_a_combo_has_at_most_combo_max_parts(sch):
    ws = [torch.randn(n + 1) for n in range(COMBO_MAX_PARTS + 3)]
    s = sch.schedule(_casts, *ws)
    sch.check_groups(s)
    assert sorted(len(k.parts) for k in _combos(s)) == [3, COMBO_MAX_PARTS]


def test_gradient_casts_at_the_end_are_one_combo_and_dependent_groups_are_not(sch):
    """The casts of two products' results that nothing else reads (a backward's weight
    gradients) form a combo; the casts of the weights the products read form another; the ReLU
    between the products feeds the second one and joins none."""
    def step(x, w1, w2):
        c1, c2 = w1.to(torch.bfloat16), w2.to(torch.bfloat16)
        h = torch.relu(x @ c1)
        g = h @ c2
        return (x.t() @ h).float(), (h.t() @ g).float()

    s = sch.schedule(step, torch.randn(8, 16, dtype=torch.bfloat16), torch.randn(16, 12), torch.randn(12, 12))
    sch.check_topological(s)
    sch.check_groups(s)
    combos = _combos(s)
    assert len(combos) == 2, [k.name for k in s.kernels()]
    sizes = sorted(sorted(int(p.xnumel) for p in c.parts) for c in combos)
    assert sizes == [[144, 192], [144, 192]]
    relu = [k for k in s.kernels() if not isinstance(k, ComboGroup)]
    assert len(relu) == 1 and int(relu[0].xnumel) == 96


def test_small_reductions_join_a_combo_and_large_ones_do_not(sch):
    """Sums over dim 0 that nothing else reads (a bias gradient's finishing sum) join the casts'
    combo while they reduce at most COMBO_MAX_REDUCED elements."""
    from coil.scheduler.combo import COMBO_MAX_REDUCED

    def fn(a, b, w, big):
        return a.sum(0), b.sum(0), w.to(torch.bfloat16), big.sum(0)

    big = torch.randn(2 * COMBO_MAX_REDUCED // 512, 512)
    s = sch.schedule(fn, torch.randn(64, 16), torch.randn(30, 5), torch.randn(9, 7), big)
    sch.check_topological(s)
    (combo,) = _combos(s)
    assert sorted((int(p.xnumel), int(p.rnumel)) for p in combo.parts) == [(5, 30), (16, 64), (63, 1)]
    # the large sum is split: its partials read all 2 * COMBO_MAX_REDUCED elements, alone
    rest = [k for k in s.kernels() if k is not combo]
    assert max(int(k.xnumel * k.rnumel) for k in rest) == 2 * COMBO_MAX_REDUCED


def test_combine_refuses_a_part_that_reads_another_a_scan_and_one_part(sch):
    def fn(a):
        b = a + 1
        return b, b * 2, a.cumsum(0)

    s = sch.schedule(fn, torch.randn(4, 6), fusion=False)
    first, second, scan = s.kernels()
    assert not first.is_reduction and not second.is_reduction and scan.is_reduction
    with pytest.raises(ValueError, match="a scan or has run-time sizes"):
        combine("c", [first, scan])
    with pytest.raises(ValueError, match="which part"):
        combine("c", [first, second])
    with pytest.raises(ValueError, match="two parts or more"):
        combine("c", [first])


def test_symbolic_sizes_form_no_combo():
    """A part's programs must be counted at compile time: casts over symbolic sizes stay apart."""
    import coil.lowering_ir as L
    from coil.scheduler import schedule
    from torch.fx.experimental.proxy_tensor import make_fx

    gm = make_fx(_casts, decomposition_table=L.decomposition_table(), tracing_mode="symbolic")(
        torch.randn(6), torch.randn(10))
    s = schedule(L.lower(gm))
    assert len(s.kernels()) == 2 and not _combos(s)
    assert all(not sympy.sympify(k.xnumel).is_Integer for k in s.kernels())


def test_reductions_over_symbolic_sizes_form_no_combo():
    """Reductions of the graph's inputs over symbolic sizes are tested for static sizes before
    their element count is compared with COMBO_MAX_REDUCED (a symbolic count has no truth
    value): they stay apart, and scheduling does not fail."""
    import coil.lowering_ir as L
    from coil.scheduler import schedule
    from torch.fx.experimental.proxy_tensor import make_fx

    def sums(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return a.sum(), b.sum()

    gm = make_fx(sums, decomposition_table=L.decomposition_table(), tracing_mode="symbolic")(
        torch.randn(6, 3), torch.randn(10, 5))
    s = schedule(L.lower(gm))
    assert not _combos(s)
    assert all(k.is_reduction for k in s.kernels())
