"""Fusion and scheduling: what fuses, what must not, order, the log, and group legality."""

from __future__ import annotations

import coil.lowering_ir as L
import coil.scheduler as S
import pytest
import sympy
import torch
from coil.scheduler import FusionIllegal, KernelGroup, plan
from coil.scheduler.group import refine, split_sizes

F = torch.nn.functional


def test_public_api_snapshot():
    assert sorted(S.__all__) == [
        "COMBO_MAX_PARTS",
        "ComboGroup",
        "FusionIllegal",
        "FusionLog",
        "KernelGroup",
        "LoopNest",
        "MATMUL_OPS",
        "MatmulCandidate",
        "MatmulOperands",
        "MatmulProduct",
        "Member",
        "OrderReport",
        "Schedule",
        "Step",
        "apply_matmul_candidates",
        "canonicalize",
        "fuse",
        "in_flight_reads",
        "is_launch",
        "is_matmul_group",
        "is_wait",
        "launch_steps",
        "matmul_candidates",
        "matmul_operands",
        "matmul_product",
        "order_steps",
        "output_buffers",
        "overlap_order",
        "plan",
        "planner_graph",
        "scatter_groups",
        "schedule",
        "with_matmul_templates",
    ]
    for name in S.__all__:
        assert hasattr(S, name)


def test_pointwise_chain_fuses_into_one_group(sch):
    s = sch.schedule(lambda x: (((x + 1) * 2).exp() - 3,), torch.randn(3, 5))
    assert len(s.steps) == 1
    (k,) = s.kernels()
    assert [m.kind for m in k.members] == ["x"] * 4
    assert k.stores == [s.graph.outputs[0].name]
    assert len(k.internal) == 3
    assert not k.is_reduction and int(k.xnumel) == 15 and int(k.rnumel) == 1
    assert k.name == "kernel0_add_mul_exp"  # the step index and the first three fused ops
    assert all(t for (_, _, t, _) in s.log.attempts if t)
    sch.check_groups(s)
    sch.check_topological(s)


@pytest.mark.parametrize(
    "fn",
    [
        lambda x, w: (torch.softmax(x, -1),),
        lambda x, w: (torch.log_softmax(x, -1),),
        lambda x, w: (F.layer_norm(x, (6,), w, w),),
        lambda x, w: (F.layer_norm(x, (6,)),),
        lambda x, w: ((x - x.mean(1, keepdim=True)) * w,),
        lambda x, w: tuple(torch.var_mean(x * 2, 1)),
    ],
    ids=["softmax", "log_softmax", "layer_norm_affine", "layer_norm", "centre_scale", "var_mean_prologue"],
)
def test_reduction_fuses_with_producer_and_consumer(sch, fn):
    x, w = torch.randn(4, 6), torch.randn(6)
    s = sch.schedule(fn, x, w)
    assert len(s.steps) == 1, [st.name for st in s.steps]
    (k,) = s.kernels()
    assert k.is_reduction
    assert int(k.xnumel) == 4 and int(k.rnumel) == 6
    assert {m.kind for m in k.members} >= {"reduce"}
    outs = S.output_buffers(s.graph.outputs)
    assert set(k.stores) == outs  # only what the graph returns reaches memory
    sch.check_groups(s)
    sch.check_topological(s)


def test_transposed_consumer_is_not_fused_and_log_says_why(sch, monkeypatch):
    monkeypatch.setenv("COIL_INLINE", "0")  # lowering would inline y into its transposed read

    def fn(x):
        y = x + 1
        return (y + y.t(),)  # reads y in two orders: no loop order makes both the written index

    s = sch.schedule(fn, torch.randn(4, 4))
    kernels = s.kernels()
    assert len(kernels) == 2
    producer, consumer = kernels
    y = producer.members[0].op.output.name
    assert producer.stores == [y]  # must reach memory: the consumer reads it from there
    assert y in consumer.members[0].op.reads()
    refused = [a for a in s.log.attempts if not a[2]]
    assert refused
    assert any(f"reads {y}" in reason for (_, _, _, reason) in refused), refused
    sch.check_groups(s)
    sch.check_topological(s)


def test_transposing_copy_fuses_in_its_producers_order(sch, monkeypatch):
    """y.t().contiguous() reads y transposed: it fuses with y's producer running in y's memory
    order (its read order), so y stays in registers and only the copy's result is stored."""
    monkeypatch.setenv("COIL_INLINE", "0")  # lowering would inline y into its transposed read

    def fn(x):
        y = x + 1
        return (y.t().contiguous() * 2,)

    s = sch.schedule(fn, torch.randn(3, 5))
    kernels = s.kernels()
    assert len(kernels) == 2
    first, second = kernels
    y = first.members[0].op.output.name
    copy = first.members[1]
    assert first.internal == [y] and first.stores == [copy.op.output.name]
    assert copy.order not in ("store", "logical")  # ordered by its read of y
    assert copy.op.output.name in second.members[0].op.reads()
    # the multiply reads the copy contiguously while the copy was written in y's order
    assert any(not t and f"reads {copy.op.output.name}" in why for (_, _, t, why) in s.log.attempts)
    sch.check_groups(s)
    sch.check_topological(s)


def test_no_cycle_through_an_extern(sch):
    """A -> mm -> B, and A, B both read x: fusing A with B would need mm inside the kernel."""

    def fn(x, w):
        a = x + 1
        e = a @ w
        return (x * 2 + e,)

    x, w = torch.randn(4, 4), torch.randn(4, 4)
    s = sch.schedule(fn, x, w)
    kinds = ["extern" if isinstance(st, L.ExternKernel) else "kernel" for st in s.steps]
    assert kinds == ["kernel", "extern", "kernel"]
    a_group, mm, b_group = s.steps
    a_origins = {o for m in a_group.members for o in m.op.origins}
    b_origins = {o for m in b_group.members for o in m.op.origins}
    assert "add" in a_origins and "add_1" in b_origins  # a = x + 1 before mm, x * 2 + e after it
    assert mm.outputs[0].name in {r for m in b_group.members for r in m.op.reads()}
    assert any(not taken and "cycle" in reason for (_, _, taken, reason) in s.log.attempts), s.log.attempts
    sch.check_topological(s)
    sch.check_groups(s)


def test_no_cycle_through_an_extern_with_chained_producers(sch):
    def fn(x, w):
        a = (x + 1).exp()
        e = a @ w
        b = (x * 2).sin()
        return (b + e, a)

    s = sch.schedule(fn, torch.randn(4, 4), torch.randn(4, 4))
    sch.check_topological(s)
    sch.check_groups(s)
    mm_pos = next(i for i, st in enumerate(s.steps) if isinstance(st, L.ExternKernel))
    # whatever fused with the final add comes after mm, whatever feeds mm comes before it
    for i, st in enumerate(s.steps):
        if isinstance(st, KernelGroup):
            names = {m.op.origins[0] for m in st.members}
            if "add_1" in names:
                assert i > mm_pos
            if "exp" in names:
                assert i < mm_pos


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: (torch.softmax(x, -1), x.sum(0), torch.cumsum(x, 1) + x),
        lambda x: ((x @ x.t()).relu() + x.sum(), x.t() * 3),
        lambda x: (F.gelu(x @ x) + 1, torch.sort(x, 1)[0].amax(1)),
        lambda x: (x.sum(0), x.sum(1), (x * 2).amax()),
        lambda x: (x / x.sum(0, keepdim=True),),
    ],
)
def test_schedule_is_topological_and_groups_are_sound(sch, fn):
    x = torch.randn(5, 5)
    for fusion in (True, False):
        s = sch.schedule(fn, x, fusion=fusion)
        sch.check_topological(s)
        sch.check_groups(s)
        names = [st.name for st in s.kernels()]
        assert len(set(names)) == len(names)


def test_fusion_off_gives_one_group_per_op(sch):
    def fn(x, w):
        return (torch.softmax(x @ w, -1) * 2,)

    g = sch.lower(fn, torch.randn(3, 4), torch.randn(4, 5))
    s = S.schedule(g, fusion=False)
    assert len(s.steps) == len(g.operations)
    assert all(len(k.members) == 1 for k in s.kernels())
    assert [st.ops[0] if isinstance(st, KernelGroup) else st for st in s.steps] == g.operations
    assert s.log.attempts == []
    assert all(k.internal == [] for k in s.kernels())
    sch.check_topological(s)
    sch.check_groups(s)


def test_fusion_log_records_taken_attempts(sch):
    s = sch.schedule(lambda x: (torch.softmax(x, 1),), torch.randn(3, 4))
    taken = [a for a in s.log.attempts if a[2]]
    assert taken and all(reason == "fused" for (_, _, _, reason) in taken)
    assert len(taken) == len(s.graph.operations) - len(s.steps)


def test_reductions_of_different_shape_stay_apart(sch, no_combos):
    s = sch.schedule(lambda x: (x.sum(1), x.sum(0)), torch.randn(3, 5))
    assert len(s.kernels()) == 2
    sch.check_groups(s)


# -- plan, refine, split_sizes ---------------------------------------------------------------------


def test_plan_rejects_mismatched_iteration_spaces(sch):
    g = sch.lower(lambda x, y: (x.sum(1), y + 1), torch.randn(3, 4), torch.randn(7))
    red, pw = g.operations
    with pytest.raises(FusionIllegal):
        plan("k", [red, pw], set(), {red.output.name, pw.output.name})


def test_plan_rejects_per_x_reader_of_per_r_value(sch, monkeypatch):
    # e = exp(x) is per (x, r); s = e[:, 0] read per x only: not expressible in one kernel
    # (lowering's inlining would substitute exp into the reader: off, to keep e an operation)
    monkeypatch.setenv("COIL_INLINE", "0")
    g = sch.lower(lambda x: (x.sum(1) + x.exp()[:, 0],), torch.randn(3, 4))
    ops = [op for op in g.operations if isinstance(op, L.Pointwise | L.Reduction)]
    with pytest.raises(FusionIllegal):
        plan("k", ops, set(), {ops[-1].output.name})


def _cuts(sizes):
    acc, out = 1, set()
    for s in sizes:
        acc *= int(s)
        out.add(acc)
    return out


@pytest.mark.parametrize(
    ("a", "b"),
    [((24,), (2, 12)), ((6, 4), (2, 12)), ((4, 6), (6, 4)), ((2, 3, 4), (6, 4)), ((5,), (5,)), ((3, 4), (4, 3))],
)
def test_refine_is_the_coarsest_common_refinement(a, b):
    a = [sympy.Integer(v) for v in a]
    b = [sympy.Integer(v) for v in b]
    got = refine(a, b)
    ca, cb = _cuts(a), _cuts(b)
    union = sorted(ca | cb)
    # a common refinement exists iff each cut divides the next one
    exists = all(hi % lo == 0 for lo, hi in zip([1, *union], union, strict=False))
    if not exists:
        assert got is None
        return
    assert got is not None
    assert _cuts(got) == ca | cb
    assert sympy.Mul(*got) == sympy.Mul(*a)


@pytest.mark.parametrize(
    ("sizes", "head", "ok"),
    [((24,), 6, True), ((2, 12), 6, True), ((4, 6), 6, False), ((2, 3, 4), 6, True), ((6, 4), 4, False), ((8,), 8, True)],
)
def test_split_sizes_brute_force(sizes, head, ok):
    sizes = [sympy.Integer(v) for v in sizes]
    got = split_sizes(sizes, sympy.Integer(head))
    if not ok:
        assert got is None
        return
    assert got is not None
    pre, suf, _ = got
    assert int(sympy.Mul(*pre)) == head
    assert sympy.Mul(*pre) * sympy.Mul(*suf) == sympy.Mul(*sizes)


def test_readers_of_a_scalar_are_not_fused_for_its_sake(sch, no_combos):
    """Three products that share only a computed scalar (as dropout masks share the RNG seed)
    stay three kernels: sharing 4 bytes saves nothing, and gathering such readers built one huge
    kernel (fusion.HORIZONTAL_MIN_BYTES). Two readers of a 4 KiB input are still fused."""
    from coil.scheduler.fusion import HORIZONTAL_MIN_BYTES

    n = 1024
    a, b, c = (torch.randn(n) for _ in range(3))
    w = torch.randn(7)  # another iteration space: the scalar's producer cannot fuse into the products

    def scalar_shared(a, b, c, w):
        s = w.sum()
        return a * s, b * s, c * s

    def input_shared(a, b, c, w):
        return b * a, c.exp() * a, w.sum() * 2

    assert 4 <= HORIZONTAL_MIN_BYTES < 4 * n
    kept = sch.schedule(scalar_shared, a, b, c, w)
    sch.check_topological(kept)
    sch.check_groups(kept)
    products = [g for g in kept.kernels() if any(m.op.output.layout.numel == n for m in g.members)]
    assert len(products) == 3, [g.name for g in kept.kernels()]
    fused = sch.schedule(input_shared, a, b, c, w)
    sch.check_groups(fused)
    readers = [g for g in fused.kernels() if any(m.op.output.layout.numel == n for m in g.members)]
    assert len(readers) == 1, [g.name for g in fused.kernels()]


def test_a_reductions_per_row_epilogue_fuses_into_its_row_kernel(sch):
    """Cross-entropy's loss per row (the target logit gathered, less the row's max and log-sum)
    runs in the kernel of the row's reductions, and the last kernel only sums one value per row:
    the per-row epilogue is tried first (fusion.EPILOGUE_WEIGHT), before the sum over rows that
    also reads it could take it (the row kernel then stored its max and log-sum for a kernel
    that gathered every row's logit in one program)."""
    x, t = torch.randn(16, 10), torch.randint(0, 10, (16,))
    s = sch.schedule(lambda x, t: (F.cross_entropy(x, t),), x, t)
    sch.check_topological(s)  # (check_groups' point-by-point oracle has no gathered indices)
    rows, total = s.kernels()
    assert int(rows.xnumel) == 16 and int(rows.rnumel) == 10
    assert int(total.rnumel) == 16
    gathers = [m for g in (rows, total) for m in g.members for ld in L.loads(m.nest.body) if ld.indirect]
    assert gathers and all(m in rows.members for m in gathers)  # the target logit: in the row kernel
    # what the row kernel hands on is one value per row (the loss term, and whether it counts)
    assert all(int(s.graph.buffers()[b].layout.numel) == 16 for b in rows.stores)


def test_kernels_of_different_devices_never_fuse():
    """A kernel runs on one device: a producer and its consumer, or two readers of one buffer,
    on different devices stay separate kernels (group.plan refuses them), whatever they save."""
    def buf(name, device):
        return L.ComputedBuffer(name, L.Layout(device, torch.float32, (sympy.Integer(64),), (sympy.Integer(1),)))

    p = sympy.Symbol("p0", integer=True, nonnegative=True)
    x = L.InputBuffer("arg0", buf("arg0", "cpu").layout, 0)
    ops = []
    for i, device in enumerate([torch.device("cuda", 0), torch.device("cuda", 1), torch.device("cuda", 0)]):
        src = ops[-1].output if ops else x
        body = L.Op("add", (L.load(src, [p]), L.Constant(1.0, torch.float32)), torch.float32)
        ops.append(L.Pointwise(f"op{i}", (f"n{i}",), buf(f"buf{i}", device), (sympy.Integer(64),), body, p))
    with pytest.raises(FusionIllegal, match="different devices"):
        plan("g", ops[:2], set(), set())
    steps = S.fuse(ops, {"buf2"})
    assert [[m.op.name for m in s.members] for s in steps] == [["op0"], ["op1"], ["op2"]]


def _the_group_over(sch, s, kernels: int, numel: int):
    """The one kernel group of schedule `s` (checked, of `kernels` kernels) whose every member
    writes `numel` elements."""
    sch.check_topological(s)
    sch.check_groups(s)
    assert len(s.kernels()) == kernels, [g.name for g in s.kernels()]
    (group,) = [g for g in s.kernels() if all(m.op.output.layout.numel == numel for m in g.members)]
    return group


def _split_sums(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Two column sums finished in two stages, as the split rule writes them: one kernel reduces
    chunks of rows into two partials (it reads `x` once for both), two more finish them."""
    chunks = x.view(8, -1, x.shape[-1])
    return chunks.sum(1).sum(0), (chunks * chunks).sum(1).sum(0)


def test_siblings_finishing_one_kernels_partials_share_a_kernel(sch):
    """The finishing sums read the two partials one kernel wrote and share no buffer: fused as
    siblings (fusion.SIBLINGS_PER_GROUP), they are one launch; the partials' kernel stays apart
    (another iteration space)."""
    s = sch.schedule(_split_sums, torch.randn(64, 16))
    assert len(_the_group_over(sch, s, 2, 16).members) == 2


def test_siblings_past_the_size_bound_stay_apart(sch, monkeypatch, no_combos):
    """Siblings merge only while their group stays within SIBLING_MAX_OPS operations (readers of
    a seed-sized output are none: test_readers_of_a_scalar_are_not_fused_for_its_sake)."""
    from coil.scheduler import fusion

    monkeypatch.setattr(fusion, "SIBLING_MAX_OPS", 1)
    s = sch.schedule(_split_sums, torch.randn(64, 16))
    sch.check_groups(s)
    assert len(s.kernels()) == 3, [g.name for g in s.kernels()]


def _counters(v, a, b, c, d):
    """Four independent single-element updates (a batch norm's step counter in four layers, two
    of them 1-element vectors) beside a vector op."""
    return v * 2, a + 1, b + 1, c * 3, d - 1


def _counter_inputs():
    return (torch.randn(16), torch.tensor(5), torch.tensor(7), torch.randn(1), torch.randn(1))


def test_independent_single_element_ops_share_one_kernel(sch, no_combos):
    """Single-element pointwise ops that share no buffer are one launch (fusion.SCALAR_MAX_OPS);
    the vector op stays apart."""
    s = sch.schedule(_counters, *_counter_inputs())
    assert len(_the_group_over(sch, s, 2, 1).members) == 4


def test_single_element_ops_past_the_size_bound_stay_apart(sch, monkeypatch, no_combos):
    from coil.scheduler import fusion

    monkeypatch.setattr(fusion, "SCALAR_MAX_OPS", 2)
    s = sch.schedule(_counters, *_counter_inputs())
    sch.check_groups(s)
    assert sorted(len(g.members) for g in s.kernels()) == [1, 2, 2], [g.name for g in s.kernels()]


def _refused_then_apart(x, v):
    """With COIL_INLINE=0, y stays a buffer that its transposed reader cannot fuse with (a
    refusal); the second output fuses in the first pass, apart."""
    y = x + 1
    return (y + y.t(), (v * 2).exp())


def test_a_refused_pair_tried_again_is_not_planned_again(sch, monkeypatch):
    """merge_greedily tries every pair again after a pass that fused anything; two groups that
    did not plan, unchanged, refuse again for the same reason without being planned again. The
    oracle: the same schedule and log with the refusals forgotten, at the cost of more plans."""
    from coil.scheduler import fusion

    monkeypatch.setenv("COIL_INLINE", "0")  # y stays a buffer its transposed reader cannot fuse with
    fn = _refused_then_apart

    planned: list[str] = []
    real_plan = fusion.plan

    def counting(name, *args, **kwargs):
        planned.append(name)
        return real_plan(name, *args, **kwargs)

    monkeypatch.setattr(fusion, "plan", counting)
    x, v = torch.randn(4, 4), torch.randn(4, 4)
    remembered = sch.schedule(fn, x, v)
    with_memo = list(planned)

    class Forgetful(dict):
        def __setitem__(self, key, value):
            pass

    real_init = fusion._Fusion.__init__

    def forgetting(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        self.illegal = Forgetful()

    monkeypatch.setattr(fusion._Fusion, "__init__", forgetting)
    planned.clear()
    forgot = sch.schedule(fn, x, v)
    assert remembered.log.attempts == forgot.log.attempts
    assert [[m.op.name for m in k.members] for k in remembered.kernels()] == [
        [m.op.name for m in k.members] for k in forgot.kernels()]
    refusals = [a for a in remembered.log.attempts if not a[2]]
    repeated = [a for a in refusals if refusals.count(a) > 1]
    assert repeated, remembered.log.attempts  # a refused pair was tried again ...
    assert len(with_memo) < len(planned)  # ... and not planned again


def test_a_refusal_keeps_no_frame_of_the_caller(sch, monkeypatch):
    """A refused fusion's error is neither kept (the memo holds its reason) nor left in a cycle:
    its traceback holds every frame up to the caller's, and with them what the caller held when
    it returned, until Python's next full collection. With the collector off, the caller's
    local goes when the caller returns."""
    import gc
    import weakref

    monkeypatch.setenv("COIL_INLINE", "0")  # y stays a buffer its transposed reader cannot fuse with

    class Held:
        pass

    def caller():
        held = Held()
        return weakref.ref(held), sch.schedule(_refused_then_apart, torch.randn(4, 4), torch.randn(4, 4))

    gc.collect()
    gc.disable()
    try:
        ref, s = caller()
        assert [a for a in s.log.attempts if not a[2]], "no fusion was refused"
        assert ref() is None, "the caller's local outlived it: a refusal holds its frame"
    finally:
        gc.enable()


def _chain(x):
    for i in range(12):
        x = x * 1.5 + i
    return (x,)


def test_a_long_chain_fuses_in_groups_of_at_most_fusion_max_ops(sch, monkeypatch, no_combos):
    """A chain longer than FUSION_MAX_OPS (an unrolled recurrence) fuses into consecutive groups
    of at most that many operations, the refusals logged; every operation runs once."""
    from coil.scheduler import fusion

    whole = sch.schedule(_chain, torch.randn(8))
    assert [len(k.members) for k in whole.kernels()] == [24]
    monkeypatch.setattr(fusion, "FUSION_MAX_OPS", 5)
    s = sch.schedule(_chain, torch.randn(8))
    sch.check_groups(s)
    sch.check_topological(s)
    sizes = [len(k.members) for k in s.kernels()]
    assert sum(sizes) == 24 and max(sizes) <= 5 and len(sizes) <= 6, sizes
    assert any("more than 5 operations" in reason for (_, _, taken, reason) in s.log.attempts if not taken)


def _readers(x):
    return tuple(x * (i + 2) for i in range(40))


def test_readers_of_one_buffer_pair_with_their_neighbours(sch, monkeypatch, no_combos):
    """40 readers of one input: each is paired with its HORIZONTAL_PARTNERS nearest readers,
    not with all 39 others (a quadratic number of pairs), and they still fuse into one kernel,
    as with every pair tried."""
    from coil.scheduler import fusion

    pairs: list[int] = []
    real = fusion._Fusion.sharing

    def counting(self):
        got = real(self)
        pairs.append(len(got))
        return got

    monkeypatch.setattr(fusion._Fusion, "sharing", counting)
    x = torch.randn(64)
    s = sch.schedule(_readers, x)
    sch.check_groups(s)
    assert [len(k.members) for k in s.kernels()] == [40]
    window = pairs[0]
    assert window <= 40 * 2 * fusion.HORIZONTAL_PARTNERS
    monkeypatch.setattr(fusion, "HORIZONTAL_PARTNERS", 40)
    pairs.clear()
    every = sch.schedule(_readers, x)
    assert pairs[0] == 40 * 39 > window
    assert [[m.op.name for m in k.members] for k in every.kernels()] == [
        [m.op.name for m in k.members] for k in s.kernels()]
