"""Inlining cheap Pointwise results read at another index (coil.lowering_ir.inline), and the
range-aware index arithmetic it uses (coil.lowering_ir.index_ranges). The reference evaluator
(conftest) runs the inlined IR against eager PyTorch."""

from __future__ import annotations

import coil.lowering_ir as L
import pytest
import sympy
import torch
import torch.nn.functional as F
from coil.lowering_ir.index_ranges import bounds, decompose, floor_div, mod, printable
from coil.lowering_ir.inline import MAX_NODES, MAX_READER_NODES, _nodes, inline_pointwise

p0, p1, p2, g = sympy.symbols("p0 p1 p2 ind999", integer=True, nonnegative=True)
CPU = torch.device("cpu")


def _layout(size, stride=None):
    size = tuple(sympy.Integer(s) for s in size)
    stride = L.contiguous_strides(size) if stride is None else tuple(sympy.Integer(s) for s in stride)
    return L.Layout(CPU, torch.float32, size, stride)


def _shapes(graph):
    """(origins, shape) of every operation's output."""
    return [(op.origins, tuple(int(s) for s in op.outputs[0].layout.size)) for op in graph.operations if op.outputs]


def _writes(graph, origin):
    """Is there an operation of its own for FX node `origin` (not inlined into another)?"""
    return any(op.origins and op.origins[0] == origin for op in graph.operations)


def _lower_both(ir, monkeypatch, fn, *inputs):
    monkeypatch.setenv("COIL_INLINE", "0")
    plain = ir.lower(fn, *inputs)
    monkeypatch.setenv("COIL_INLINE", "1")
    return plain, ir.lower(fn, *inputs)


# -- index arithmetic ------------------------------------------------------------------------------


def test_floor_and_mod_vanish_when_the_rest_is_in_range():
    r = {p0: (sympy.Integer(0), sympy.Integer(2047)), g: (sympy.Integer(0), sympy.Integer(50256))}
    assert floor_div(50257 * p0 + g, sympy.Integer(50257), r) == p0
    assert mod(50257 * p0 + g, sympy.Integer(50257), r) == g
    # the rest in [k d, (k + 1) d): floor is exact with an offset
    assert floor_div(50257 * p0 + g + 50257, sympy.Integer(50257), r) == p0 + 1
    assert mod(50257 * p0 + g - 50257, sympy.Integer(50257), r) == g


def test_floor_kept_only_with_a_non_negative_numerator():
    r = {p0: (sympy.Integer(0), sympy.Integer(23)), p1: (sympy.Integer(0), sympy.Integer(36))}
    got = floor_div(p0, sympy.Integer(6), r)
    assert got == sympy.floor(p0 / 6) and printable(got, r)
    assert mod(p0, sympy.Integer(6), r) == sympy.Mod(p0, 6)
    # p1 - 1 is -1 at p1 = 0: C's // would round towards 0, not down -> no answer
    assert floor_div(37 * p0 + p1 - 1, sympy.Integer(37), r) is None
    assert mod(37 * p0 + p1 - 1, sympy.Integer(37), r) is None
    # a data-dependent index without a known bound has no bounds
    assert bounds(g, r) is None and floor_div(g, sympy.Integer(4), r) is None


def test_symbolic_divisor_needs_an_exact_answer():
    s = sympy.Symbol("s0", integer=True, positive=True)
    r = {p0: (sympy.Integer(0), sympy.Integer(7)), g: (sympy.Integer(0), s - 1)}
    assert floor_div(s * p0 + g, s, r) == p0
    assert mod(s * p0 + g, s, r) == g
    assert floor_div(p0, s, r) is None  # floor(p0 / s0) would need a symbolic divisor


def test_decompose_dense_layouts_only():
    r = {p0: (sympy.Integer(0), sympy.Integer(3)), p1: (sympy.Integer(0), sympy.Integer(4)),
         p2: (sympy.Integer(0), sympy.Integer(5))}
    # [4, 5, 6] contiguous, read at its own index
    assert decompose(30 * p0 + 6 * p1 + p2, _layout((4, 5, 6)), r) == [p0, p1, p2]
    # a transposed layout [5, 4] with strides (1, 5); size-1 dims are 0
    assert decompose(5 * p0 + p1, _layout((5, 1, 4), (1, 20, 5)), r) == [p1, 0, p0]
    # overlapping (an expanded stride 0) or gapped layouts are not decomposed
    assert decompose(p0, _layout((4, 5), (1, 0)), r) is None
    assert decompose(p0, _layout((4, 5), (10, 1)), r) is None


# -- inlining through lowering ---------------------------------------------------------------------


def test_gather_of_log_softmax_reads_the_logits(ir, monkeypatch):
    def fn(x, t):
        return (torch.gather(torch.log_softmax(x, 1), 1, t[:, None]),)

    x, t = torch.randn(6, 11), torch.randint(0, 11, (6,))
    plain, g = _lower_both(ir, monkeypatch, fn, x, t)
    full = [o for o, s in _shapes(g) if s == (6, 11)]
    assert len(full) < len([o for o, s in _shapes(plain) if s == (6, 11)])
    gather = next(op for op in g.operations if "gather" in op.origins)
    assert len(gather.origins) > 1  # log_softmax's subtractions live in the gather now
    sizes = {b: tuple(int(s) for s in buf.layout.size) for b, buf in g.buffers().items()}
    read = [b for b in gather.reads() if sizes[b] == (6, 11)]
    assert read == ["arg0"]  # the logits themselves, at the gathered index
    ir.assert_same(ir.evaluate(g, [x, t]), list(fn(x, t)))


def test_cat_with_neg_takes_the_neg(ir, monkeypatch):
    def rotate_half(x):
        x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
        return torch.cat((-x2, x1), dim=-1)

    def fn(q, cos, sin):
        return (q * cos + rotate_half(q) * sin,)

    q, cos, sin = torch.randn(2, 3, 4, 8), torch.randn(4, 8), torch.randn(4, 8)
    plain, g = _lower_both(ir, monkeypatch, fn, q, cos, sin)
    assert _writes(plain, "neg") and not _writes(g, "neg")
    assert len(g.operations) == len(plain.operations) - 1
    ir.assert_same(ir.evaluate(g, [q, cos, sin]), list(fn(q, cos, sin)))


def test_masked_and_shifted_reader_pad(ir, monkeypatch):
    """constant_pad_nd reads exp(x) masked, one column to the left: the mask bounds the column
    to [1, 5], so the shift decomposes without a floor."""

    def fn(x):
        return (F.pad(x.exp(), (1, 2), value=-1.0) * 2,)

    x = torch.randn(3, 5)
    plain, g = _lower_both(ir, monkeypatch, fn, x)
    assert _writes(plain, "exp") and not _writes(g, "exp")
    pad = next(op for op in g.operations if "constant_pad_nd" in op.origins)
    (ld,) = L.loads(pad.body)[:1]
    assert ld.buffer == "arg0" and ld.mask is not None
    ir.assert_same(ir.evaluate(g, [x]), list(fn(x)))


def test_index_select_through_a_flattening_view_keeps_floor_and_mod(ir):
    """The gathered index runs over 24 elements of a [4, 6] producer: the position is
    (floor(i / 6), i mod 6), which the printer can write (i >= 0)."""

    def fn(x, i):
        return (torch.index_select((x * 2 + 1).reshape(-1), 0, i),)

    x, i = torch.randn(4, 6), torch.tensor([0, 5, 6, 23, 17, 17, 3])
    g = ir.lower(fn, x, i)
    assert not _writes(g, "mul") and not _writes(g, "add")
    ir.assert_same(ir.evaluate(g, [x, i]), list(fn(x, i)))


@pytest.mark.parametrize("reader", ["copy", "sum"])
def test_transposed_reader_pointwise_and_reduction(ir, monkeypatch, reader):
    def fn(x):
        y = x.sin() * 3
        return (y.t().contiguous() + 1,) if reader == "copy" else (y.t().sum(1),)

    x = torch.randn(5, 7)
    plain, g = _lower_both(ir, monkeypatch, fn, x)
    assert _writes(plain, "sin") and not _writes(g, "sin") and not _writes(g, "mul")
    ir.assert_same(ir.evaluate(g, [x]), list(fn(x)))


def test_producer_read_in_full_by_several_readers_stays(ir):
    """Each reader would recompute it over all its elements and load both its inputs (8 bytes
    an element) where it loads the materialised 4."""

    def fn(x, z):
        y = x.sin() * z
        return (y.t().contiguous(), y.sum(0), y.t().sum(1))

    g = ir.lower(fn, torch.randn(5, 7), torch.randn(5, 7))
    assert _writes(g, "mul")


def test_tiny_producer_loading_its_own_width_is_recomputed_by_several_readers(ir):
    """`sin(x) * 3` in fp32 loads 4 bytes an element, as many as its buffer holds: each reader
    loads x instead of y, and y is never written (fp32 softmax over few long columns)."""

    def fn(x):
        y = x.sin() * 3
        return (y.t().contiguous(), y.sum(0), y.t().sum(1))

    x = torch.randn(5, 7)
    g = ir.lower(fn, x)
    assert not _writes(g, "mul")
    ir.assert_same(ir.evaluate(g, [x]), list(fn(x)))


def test_producer_with_its_own_gather_gets_fresh_symbols(ir):
    """An embedding read transposed twice: each copy of its body binds its own index symbol."""

    def fn(w, i):
        e = F.embedding(i, w)
        return (e.t() * e.t(),)

    w, i = torch.randn(9, 4), torch.tensor([3, 0, 8, 3, 1])
    g = ir.lower(fn, w, i)
    assert not _writes(g, "embedding")
    (mul,) = [op for op in g.operations if "mul" in op.origins]
    syms = [s for ld in L.loads(mul.body) for s, _ in ld.indirect]
    assert syms and len(syms) == len(set(syms))
    ir.assert_same(ir.evaluate(g, [w, i]), list(fn(w, i)))


def test_stencil_of_stencils_stops_growing(ir):
    def fn(x):
        y = x
        for _ in range(8):
            y = y[:-1] + y[1:]  # each level reads the previous one at two shifted places
        return (y,)

    x = torch.randn(12)
    g = ir.lower(fn, x)
    assert 1 < len(g.operations) < 8
    assert all(len(_nodes(op.body)) <= MAX_READER_NODES + MAX_NODES for op in g.operations)
    ir.assert_same(ir.evaluate(g, [x]), list(fn(x)))


def test_chain_inlines_step_by_step(ir):
    def fn(x, t):
        y = ((x * 2).exp() + 1).tanh()
        return (torch.gather(y, 1, t),)

    x, t = torch.randn(3, 9), torch.randint(0, 9, (3, 2))
    g = ir.lower(fn, x, t)
    assert [op.origins[0] for op in g.operations] == ["gather"]
    ir.assert_same(ir.evaluate(g, [x, t]), list(fn(x, t)))


def test_half_producer_is_rounded_as_when_stored(ir, monkeypatch):
    def fn(x, t):
        return (torch.gather((x * 3.3).to(torch.float16) * 1.7, 1, t).float(),)

    x, t = torch.randn(4, 8), torch.randint(0, 8, (4, 3))
    plain, g = _lower_both(ir, monkeypatch, fn, x, t)
    assert [op.origins[0] for op in g.operations] == ["gather", "_to_copy_1"]
    got, want = ir.evaluate(g, [x, t]), ir.evaluate(plain, [x, t])
    assert torch.equal(got[0], want[0])  # bit for bit: the float16 store and reload are kept


def test_constants_are_inlined_into_broadcasting_readers(ir):
    def fn(x):
        return (torch.where(x > 0, x, torch.scalar_tensor(-2.0)),)

    x = torch.randn(4, 5)
    g = ir.lower(fn, x)
    assert not _writes(g, "scalar_tensor") and _writes(g, "gt")  # gt: read at its index
    ir.assert_same(ir.evaluate(g, [x]), list(fn(x)))


def test_a_lone_reader_broadcasting_a_small_producer_recomputes_it(ir):
    """An inference batch norm: rsqrt(var + eps) * weight per channel, read per element by the
    normalisation, its one reader. The scheduler fuses only equal iteration spaces, so the
    per-channel chain would be a kernel of its own; the reader recomputes it. With two readers
    the chain stays (each would recompute it)."""

    def one(x, var, w):
        return (x * (torch.rsqrt(var + 1e-5) * w)[None, :, None, None],)

    def two(x, var, w):
        s = (torch.rsqrt(var + 1e-5) * w)[None, :, None, None]
        return (x * s, x.exp() + s)

    x, var, w = torch.randn(2, 3, 4, 5), torch.rand(3) + 0.5, torch.randn(3)
    g = ir.lower(one, x, var, w)
    assert [shape for _, shape in _shapes(g)] == [(2, 3, 4, 5)]  # one operation: the reader
    ir.assert_same(ir.evaluate(g, [x, var, w]), list(one(x, var, w)))
    g2 = ir.lower(two, x, var, w)
    assert (3,) in [shape for _, shape in _shapes(g2)]
    ir.assert_same(ir.evaluate(g2, [x, var, w]), list(two(x, var, w)))


# -- what stays ------------------------------------------------------------------------------------


def test_same_index_readers_are_left_to_the_scheduler(ir):
    def fn(x):
        y = x.exp()
        return (y + 1, y.sum(1))

    g = ir.lower(fn, torch.randn(3, 4))
    assert _writes(g, "exp")


def test_outputs_externs_random_and_big_bodies_stay(ir, monkeypatch):
    def returned(x, t):
        y = x.exp()
        return (torch.gather(y, 1, t), y)

    def extern(x, t, w):
        y = x.exp()
        return (torch.gather(y, 1, t), y @ w)

    def random(x, t):
        return (torch.gather(torch.rand_like(x) * x, 1, t),)

    def big(x, t):
        return (torch.gather(torch.lgamma(x), 1, t),)  # a Lanczos formula: > MAX_NODES nodes

    x, t, w = torch.randn(3, 4), torch.randint(0, 4, (3, 2)), torch.randn(4, 2)
    assert _writes(ir.lower(returned, x, t), "exp")
    assert _writes(ir.lower(extern, x, t, w), "exp")
    assert _writes(ir.lower(random, x, t), "rand_like")  # mul (which reads it) is inlined
    assert _writes(ir.lower(big, x, t), "lgamma")
    monkeypatch.setenv("COIL_INLINE", "0")
    assert _writes(ir.lower(lambda x, t: (torch.gather(x.exp(), 1, t),), x, t), "exp")


def test_a_mutated_input_between_producer_and_reader_blocks_it():
    """A Pointwise reading an input that a copy_ epilogue overwrites before the reader runs."""
    arg = L.InputBuffer("arg0", _layout((4,)), 0)
    b1 = L.ComputedBuffer("buf1", _layout((4,)))
    b2 = L.ComputedBuffer("buf2", _layout((4,)))
    x = sympy.Symbol("p0", integer=True, nonnegative=True)
    neg = L.Pointwise("op1", ("neg",), b1, (sympy.Integer(4),),
                      L.Op("neg", (L.load(arg, [x]),), torch.float32), x)
    copy = L.ExternKernel("op2", ("copy_",), torch.ops.aten.copy_.default, (arg, arg), {}, None, False, ("arg0",))
    flip = L.Pointwise("op3", ("flip",), b2, (sympy.Integer(4),), L.load(b1, [3 - x]), x)
    ops = inline_pointwise([neg, copy, flip], [b2])
    assert [op.name for op in ops] == ["op1", "op2", "op3"]
    ops = inline_pointwise([neg, flip, copy], [b2])
    assert [op.name for op in ops] == ["op3", "op2"]
    assert L.loads(ops[0].body)[0].index == 3 - x


@pytest.mark.parametrize("dims", [(0, 1), (1, 0)])
def test_gather_along_either_dim(ir, dims):
    d, _ = dims

    def fn(x, t):
        return (torch.gather(torch.log_softmax(x, 1 - d), d, t),)

    x = torch.randn(5, 6)
    t = torch.randint(0, x.shape[d], (2, 3) if d == 0 else (5, 2))
    g = ir.lower(fn, x, t)
    ir.assert_same(ir.evaluate(g, [x, t]), list(fn(x, t)))


# -- random compositions ---------------------------------------------------------------------------

_PRODUCERS = [
    lambda y: y * 2 + 1,
    lambda y: y.sin().exp(),
    lambda y: (y * 1.37).to(torch.float16).float() * 0.5,
    lambda y: torch.where(y > 0, y, -y * 3),
    lambda y: torch.neg(y),
    lambda y: torch.full_like(y, 0.25) + y,
]


def _readers(rng: torch.Generator):
    def pick(hi: int) -> int:
        return int(torch.randint(0, hi, (), generator=rng))

    k, pads = pick(1000), (pick(3), pick(3), pick(2))

    def gather(y):  # data-dependent indices, computed in the graph (traced and run alike)
        i = (torch.arange(y.shape[0] * 2).reshape(-1, 2) * 7 + k) % y.shape[1]
        return torch.gather(y, 1, i)

    def index_flat(y):
        i = (torch.arange(5) * 11 + k) % y.numel()
        return torch.index_select(y.reshape(-1), 0, i).reshape(1, 5)

    return [
        gather,
        index_flat,
        lambda y: torch.cat((-y[:, y.shape[1] // 2:], y[:, : y.shape[1] // 2]), 1),
        lambda y: F.pad(y, (pads[0], pads[1], pads[2], 0), value=0.5),
        lambda y: y.t().contiguous(),
        lambda y: y.flip(0),
        lambda y: y[::2, 1:],
        lambda y: y.t().sum(1, keepdim=True),
        lambda y: y[:, 1:] - y[:, :-1],
        lambda y: y,
    ]


@pytest.mark.parametrize("seed", range(12))
def test_random_compositions_equal_eager(ir, seed):
    rng = torch.Generator().manual_seed(seed)
    readers = _readers(rng)
    steps = []
    for _ in range(3):
        steps.append(_PRODUCERS[int(torch.randint(0, len(_PRODUCERS), (), generator=rng))])
        steps.append(readers[int(torch.randint(0, len(readers), (), generator=rng))])
    x = torch.randn(6, 8, generator=rng)

    def fn(x):
        y = x
        for f in steps:
            y = f(y)
            if y.dim() != 2 or min(y.shape) < 2:
                y = y.reshape(1, -1) if y.numel() >= 2 else torch.cat((y.reshape(1, -1), y.reshape(1, -1)), 1)
        return (y,)

    g = ir.lower(fn, x)
    ir.assert_same(ir.evaluate(g, [x]), list(fn(x)))


def test_narrowing_producer_is_recomputed_by_its_direct_readers(ir, monkeypatch):
    """float(x_bf16) - mean read by a reduction and a pointwise (a batch norm backward): each
    reader loads 2 bytes of x instead of 4 bytes of a materialised fp32 copy."""

    def fn(x, mean, dy):
        xc = x.float() - mean
        s = (dy * xc).sum((0, 2))
        return (s, dy - xc * s[None, :, None])

    x = torch.randn(2, 3, 5).to(torch.bfloat16)
    mean, dy = torch.randn(1, 3, 1), torch.randn(2, 3, 5)
    plain, g = _lower_both(ir, monkeypatch, fn, x, mean, dy)
    assert _writes(plain, "sub") and not _writes(g, "sub") and not _writes(g, "_to_copy")
    ir.assert_same(ir.evaluate(g, [x, mean, dy]), list(fn(x, mean, dy)))


def test_narrowing_producer_read_only_by_split_partials_is_recomputed(ir, monkeypatch):
    """Batch-norm statistics of a bf16 channels-last activation, split into partial reductions
    (their reads walk chunks, not the copy's store order): the fp32 copy is read by them alone,
    and each loads 2 bytes of x instead of 4 bytes of a copy written for it."""
    monkeypatch.setenv("COIL_SPLIT_REDUCTION_MIN", "16")

    def fn(x):
        return tuple(torch.var_mean(x.float(), (0, 2, 3), correction=0))

    x = (torch.randn(4, 8, 6, 6) * 2 + 1).to(torch.bfloat16).to(memory_format=torch.channels_last)
    plain, g = _lower_both(ir, monkeypatch, fn, x)
    assert len([op for op in plain.operations if isinstance(op, L.Reduction)]) > 2  # split
    assert _writes(plain, "_to_copy") and not _writes(g, "_to_copy")
    ir.assert_same(ir.evaluate(g, [x]), list(fn(x)))


def test_producer_of_full_width_reads_stays_with_only_direct_readers(ir):
    """The same with x already fp32 and every reader reading xc in its own order: the scheduler
    fuses it into them, so it stays for the scheduler."""

    def fn(x, mean, dy):
        xc = x - mean
        return (dy * xc, xc.exp() + 1)

    g = ir.lower(fn, torch.randn(2, 3, 5), torch.randn(1, 3, 1), torch.randn(2, 3, 5))
    assert _writes(g, "sub")


def test_producer_of_full_width_reads_is_recomputed_when_a_reader_is_not_direct(ir):
    """x fp32 and xc read per channel by the reduction: recomputing loads x where reloading
    loads xc (as many bytes), and xc need not be written for the reduction's order."""

    def fn(x, mean, dy):
        xc = x - mean
        s = (dy * xc).sum((0, 2))
        return (s, dy - xc * s[None, :, None])

    args = (torch.randn(2, 3, 5), torch.randn(1, 3, 1), torch.randn(2, 3, 5))
    g = ir.lower(fn, *args)
    assert not _writes(g, "sub")
    ir.assert_same(ir.evaluate(g, list(args)), list(fn(*args)))


def _nll_backward_padded(labels, scale, logits, lse):
    """A cross-entropy backward whose gradient is padded for an aligned matmul (BERT's LM head):
    the bf16 one-hot gradient is read by its row sum and, masked, by the padded pointwise."""
    iota = torch.arange(logits.shape[1])
    onehot = torch.where(iota[None, :] == labels[:, None], -1.0, 0.0) * torch.where(labels[:, None] != -100, scale, 0.0)
    g = onehot.to(torch.bfloat16)
    s = g.float().sum(1, keepdim=True)
    out = F.pad(g.float() - torch.exp(logits.float() - lse) * s, (0, 3))
    return (out.to(torch.bfloat16),)


def test_broadcast_only_producer_chain_is_recomputed_by_its_readers(ir, monkeypatch):
    """The one-hot gradient reads only per-row labels and a scalar once its exclusive producers
    (the comparison with the iota, the scaling) are counted in: no [rows, vocab] buffer of it is
    stored; the row sum and the padded pointwise each recompute it."""
    labels = torch.tensor([3, -100, 0, 6, 2])
    args = (labels, torch.tensor(0.25), torch.randn(5, 7).to(torch.bfloat16), torch.randn(5, 1))
    plain, g = _lower_both(ir, monkeypatch, _nll_backward_padded, *args)
    big = [s for _, s in _shapes(g) if s == (5, 7)]
    assert [s for _, s in _shapes(plain) if s == (5, 7)], "the plain lowering stores the one-hot gradient"
    assert not big, _shapes(g)
    ir.assert_same(ir.evaluate(g, list(args)), list(_nll_backward_padded(*args)))


def test_a_gather_with_several_readers_is_not_broadcast_only(ir, monkeypatch):
    """An embedding lookup read by two readers at full size stays one buffer: its loads are
    data-dependent (a row per element), so it is not recomputed by each reader."""

    def fn(table, ids, w):
        e = table[ids]
        return (e.sum(1), e * w)

    args = (torch.randn(10, 6), torch.tensor([[1, 4, 4], [0, 9, 2]]), torch.randn(6))
    plain, g = _lower_both(ir, monkeypatch, fn, *args)
    assert [s for _, s in _shapes(g) if s == (2, 3, 6)] == [s for _, s in _shapes(plain) if s == (2, 3, 6)]
    ir.assert_same(ir.evaluate(g, list(args)), list(fn(*args)))


def test_iota_comparison_follows_the_producer_it_fed_into_its_readers(ir):
    """ViT's backward: `where(arange(17) == 0, g, 0)` is recomputed by the reductions reading it
    across rows; the iota and the comparison, which read no buffer, follow it there instead of
    staying a kernel of their own."""

    def fn(g):
        mask = torch.arange(17) == 0
        y = torch.where(mask[None, :, None], g, 0.0)
        return (y.sum(2), y.sum((0, 1)), y.transpose(0, 2).contiguous())

    g_in = torch.randn(2, 17, 8)
    g = ir.lower(fn, g_in)
    assert not _writes(g, "where") and not _writes(g, "eq") and not _writes(g, "arange")
    ir.assert_same(ir.evaluate(g, [g_in]), list(fn(g_in)))
