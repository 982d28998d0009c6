"""build(): allocation before use, freeing after last use, safe reuse; and end-to-end execution."""

from __future__ import annotations

import coil.lowering_ir as L
import coil.wrapper_codegen as WC
import pytest
import sympy
import torch
from coil.scheduler import Schedule, schedule
from coil.wrapper_codegen import (
    Allocate,
    DynamicShapeError,
    ExternCall,
    Free,
    KernelCall,
    Return,
    Reuse,
    SizeOf,
    Unpack,
    View,
    build,
    emit_python,
    op_name,
)

F = torch.nn.functional
STEP_LINES = (KernelCall, ExternCall)


def test_public_api_snapshot():
    assert sorted(WC.__all__) == [
        "ALIGNMENT",
        "Allocate",
        "Arena",
        "ArenaBuffer",
        "ArenaPlan",
        "BindSymbol",
        "CheckInput",
        "DynamicShapeError",
        "ExternCall",
        "Free",
        "IndirectPlan",
        "InputLayout",
        "KernelCall",
        "KernelLaunch",
        "Line",
        "Place",
        "Ref",
        "Return",
        "Reuse",
        "SizeOf",
        "TRACKER",
        "Track",
        "Unpack",
        "View",
        "WrapperProgram",
        "arena_view",
        "build",
        "check_bound",
        "emit_fx",
        "emit_fx_graph",
        "emit_line",
        "emit_python",
        "op_name",
        "plan_arenas",
        "plan_indirect",
        "pyrepr",
        "track_lifetimes",
    ]
    for name in WC.__all__:
        assert hasattr(WC, name)


# -- a line-level simulator ----------------------------------------------------------------------------


def simulate(prog, refs):
    """Walk the lines; return per-name facts. Asserts nothing is used undefined or after a del."""
    lines = prog.lines
    assert isinstance(lines[0], Unpack) and isinstance(lines[-1], Return)
    assert sum(isinstance(ln, Unpack) for ln in lines) == 1
    assert sum(isinstance(ln, Return) for ln in lines) == 1
    live = {n for n in lines[0].names if n is not None} | set(prog.constants)
    inputs = set(live) - set(prog.constants)
    defined_at, killed_at, uses = {}, {}, {}
    view_base = {}
    donations = []
    for i, ln in enumerate(lines):
        used, defs, kills = [], [], []
        if isinstance(ln, Allocate):
            defs = [ln.name]
        elif isinstance(ln, WC.Arena):
            defs = [ln.name, *(WC.arena_view(ln.name, d) for d in ln.dtypes)]
        elif isinstance(ln, WC.Place):
            defs = [ln.name]
            assert WC.arena_view(ln.arena, ln.dtype) in live, f"line {i} places {ln.name} in a dead arena"
        elif isinstance(ln, Reuse):
            used, kills, defs = [ln.donor], [ln.donor], [ln.name]
            donations.append((i, ln))
        elif isinstance(ln, Free):
            used, kills = [ln.name], [ln.name]
        elif isinstance(ln, View):
            used, defs = [ln.base], [ln.name]
            view_base[ln.name] = ln.base
        elif isinstance(ln, KernelCall):
            used = list(ln.args)
        elif isinstance(ln, ExternCall):
            used = refs(ln.args) + refs([v for _, v in ln.kwargs])
            defs = refs(ln.results)
            assert {n for n, _, _ in ln.expect} <= set(defs)
        elif isinstance(ln, Return):
            used = refs(ln.values)
        for n in used:
            assert n in live, f"line {i} {ln} uses {n}, which is not live"
            uses.setdefault(n, []).append(i)
            base = view_base.get(n)
            while base is not None:  # a use of a view is a use of its base's storage
                uses.setdefault(base, []).append(i)
                base = view_base.get(base)
        for n in kills:
            live.discard(n)
            killed_at[n] = i
        for n in defs:
            assert n not in live, f"line {i} redefines live {n}"
            live.add(n)
            defined_at[n] = i
    return {
        "live_at_end": live, "inputs": inputs, "defined_at": defined_at, "killed_at": killed_at,
        "uses": uses, "view_base": view_base, "donations": donations,
    }


def check_program(s: Schedule, prog, refs, *, views_too=False):
    facts = simulate(prog, refs)
    lines = prog.lines
    bufs = s.graph.buffers()
    ret = lines[-1]
    out_names = set(refs(ret.values))
    out_storage = {facts["view_base"].get(n, n) for n in out_names}
    # every kernel store is allocated (or takes a donor's storage) before its kernel runs
    kcall = {ln.kernel: i for i, ln in enumerate(lines) if isinstance(ln, KernelCall)}
    for k in s.kernels():
        for w in k.stores:
            assert facts["defined_at"][w] < kcall[k.name]
    # nothing that is returned is ever freed
    for n in out_storage:
        assert n not in facts["killed_at"], f"output {n} freed"
    # every other buffer is dropped, right after the step that last uses it
    ignore = set(prog.constants) | out_storage | set(facts["view_base"]) | out_names
    leftovers = facts["live_at_end"] - ignore
    if not views_too:
        assert not leftovers, f"never freed: {sorted(leftovers)}"
    arenas = {n for ln in lines if isinstance(ln, WC.Arena) for n in (ln.name, *(WC.arena_view(ln.name, d) for d in ln.dtypes))}
    for n, at in facts["killed_at"].items():
        if n in arenas:  # freed after its last buffer's last step, checked in test_arena.py
            continue
        last_use = max(u for u in facts["uses"][n] if u < at) if any(u < at for u in facts["uses"][n]) else None
        if last_use is not None:
            between = lines[last_use + 1: at]
            assert not any(isinstance(ln, STEP_LINES) for ln in between), f"{n} freed late"
    # reuse: same bytes, same dtype/device, donor dead before the taker is written
    for i, r in facts["donations"]:
        a, b = bufs[r.donor], bufs[r.name]
        assert a.layout.dtype == b.layout.dtype and a.layout.device == b.layout.device
        nbytes = lambda buf: int(buf.layout.storage_extent()) * buf.layout.dtype.itemsize  # noqa: E731
        assert nbytes(a) == nbytes(b)
        assert max(facts["uses"][r.donor]) == i  # the Reuse line is the donor's last mention
        assert r.size == tuple(int(x) for x in b.layout.size)
        assert r.stride == tuple(int(x) for x in b.layout.stride)
        assert r.donor not in out_storage
    if views_too:
        return facts, leftovers
    return facts


GRAPHS = {
    "softmax_ln": (lambda x, w: (torch.softmax(x, -1), F.layer_norm(x, (6,), w, w)), lambda: (torch.randn(3, 6), torch.randn(6))),
    "chain_reuse": (lambda x: (((x + 1).exp() * 2).t().contiguous().sin().t().contiguous() + 3,), lambda: (torch.randn(4, 4),)),
    "externs_views": (
        lambda x, w: (torch.cumsum((x @ w).relu(), 1), x.t(), (x @ w)[1:, ::2] * 2),
        lambda: (torch.randn(3, 4), torch.randn(4, 5)),
    ),
    "reductions": (lambda x: (x.sum(0), x.amax(1), torch.var_mean(x, 1)[0], x - x.mean()), lambda: (torch.randn(4, 5),)),
    "int_and_bool": (lambda a, x: (a * 2 + 1, (x > 0).sum(1), torch.where(x > 0, a, -a)), lambda: (torch.randint(-5, 5, (3, 4)), torch.randn(3, 4))),
}




def _lifetime_params():
    for name in sorted(GRAPHS):
        for reuse in (True, False):
            yield pytest.param(name, reuse, id=f"{name}-{'reuse' if reuse else 'noreuse'}")


@pytest.mark.parametrize(("name", "reuse"), list(_lifetime_params()))
def test_program_lifetimes(wr, refs, name, reuse):
    fn, make = GRAPHS[name]
    s = wr.schedule(fn, *make())
    prog = wr.program(s, reuse=reuse)
    assert (prog.reuse is not None) == reuse
    if not reuse:
        assert not any(isinstance(ln, Reuse) for ln in prog.lines)
    check_program(s, prog, refs)


@pytest.mark.parametrize("reuse", [True, False])
@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_program_execution_matches_eager(wr, name, reuse):
    fn, make = GRAPHS[name]
    torch.manual_seed(0)
    wr.check(fn, *make(), reuse=reuse)


def test_reuse_happens_and_matches_the_plan(wr, refs):
    fn, make = GRAPHS["chain_reuse"]
    s = wr.schedule(fn, *make(), fusion=False)
    prog = wr.program(s)
    facts = check_program(s, prog, refs)
    assert facts["donations"], "a chain of same-size buffers should reuse storage"
    renamed = {base: out for out, base in prog.inplace.items()}  # storage that moved in place
    for _, r in facts["donations"]:  # a kernel writing over what it reads, or the plan's reuse
        donor = prog.inplace.get(r.name) or prog.reuse.storage[r.name]
        while r.name not in prog.inplace and donor in renamed:
            donor = renamed[donor]
        assert donor == r.donor
    assert prog.reuse.peak_bytes <= prog.reuse.unplanned_peak_bytes
    wr.check(fn, *make(), fusion=False)


def test_fallback_ops_are_listed_and_layout_enforced(wr):
    def fn(x):
        return (torch.kthvalue(x, 2, 1)[0] + 1, torch.sort(x, 1)[1])

    s = wr.schedule(fn, torch.randn(3, 4))
    prog = wr.program(s)
    assert sorted(prog.fallback_ops) == ["aten.kthvalue.default", "aten.sort.default"]
    ext = [ln for ln in prog.lines if isinstance(ln, ExternCall)]
    assert all(ln.expect for ln in ext)  # fallbacks get their layout enforced
    src, _ = wr.check(fn, torch.randn(3, 4))
    assert "ensure_layout(" in src


def test_intended_externs_do_not_enforce_layout(wr):
    s = wr.schedule(lambda a, b: (a @ b,), torch.randn(2, 3), torch.randn(3, 4))
    prog = wr.program(s)
    (ext,) = [ln for ln in prog.lines if isinstance(ln, ExternCall)]
    assert ext.op == "torch.ops.aten.mm.default" and ext.expect == ()
    assert prog.fallback_ops == []


def test_graph_constants_are_passed_through(wr):
    from torch._subclasses.fake_tensor import FakeTensorMode

    scale = torch.arange(4.0)
    root = torch.nn.Module()
    root.register_buffer("scale", scale)
    g = torch.fx.Graph()
    x = g.placeholder("x")
    c = g.get_attr("scale")
    mul = g.call_function(torch.ops.aten.mul.Tensor, (x, c))
    g.output((mul,))
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        x.meta["val"] = mode.from_tensor(torch.empty(2, 4))
        c.meta["val"] = mode.from_tensor(scale)
        mul.meta["val"] = x.meta["val"] * c.meta["val"]
    from coil.scheduler import schedule

    s = schedule(L.lower(torch.fx.GraphModule(root, g)))
    call, src, prog, _ = wr.compile(s)
    assert list(prog.constants) == ["const0"] and prog.constants["const0"] is scale
    assert "const0 = constants['const0']" in src
    inp = torch.randn(2, 4)
    (got,) = call([inp])
    torch.testing.assert_close(got, inp * scale)


def _sym_graph(bind_symbol):
    s0 = sympy.Symbol("s0", integer=True, positive=True)
    lay = L.Layout(torch.device("cpu"), torch.float32, (s0,), (sympy.Integer(1),))
    arg = L.InputBuffer("arg1" if bind_symbol else "arg0", lay, 1 if bind_symbol else 0)
    view_lay = L.Layout(torch.device("cpu"), torch.float32, (s0 - 1,), (sympy.Integer(1),), sympy.Integer(1))
    view = L.ReinterpretView("view9", arg, view_lay)
    inputs = [L.SymbolInput(0, s0), arg] if bind_symbol else [arg]
    return L.LoweredGraph("g", inputs, [], [], [view]), s0


@pytest.mark.parametrize("bind_symbol", [True, False], ids=["symbol_input", "size_of_tensor"])
def test_symbolic_sizes_are_computed_at_run_time(refs, bind_symbol):
    g, s0 = _sym_graph(bind_symbol)
    prog = build(Schedule(g, []), {})
    lines = prog.lines
    assert isinstance(lines[0], Unpack)
    if bind_symbol:
        assert lines[0].names == ("s0", "arg1")
        assert not any(isinstance(ln, SizeOf) for ln in lines)
    else:
        assert lines[0].names == ("arg0",)
        assert SizeOf("s0", "arg0", 0) in lines
    (view,) = [ln for ln in lines if isinstance(ln, View)]
    assert view.size == (s0 - 1,)
    src = emit_python(lines, [], [], "sym")
    ns = {}
    exec(compile(src, "<wrapper>", "exec"), ns)
    call = ns["make"](torch.device("cpu"), {}, {})
    for n in (3, 7):
        x = torch.randn(n)
        (got,) = call([n, x] if bind_symbol else [x])
        assert torch.equal(got, x[1:]) and got.data_ptr() == x[1:].data_ptr()
    assert issubclass(DynamicShapeError, NotImplementedError)


def test_op_name_round_trips():
    for op in (torch.ops.aten.mm.default, torch.ops.aten.add.Tensor, torch.ops.aten.var_mean.correction,
               torch.ops.prims.convert_element_type.default):
        name = op_name(op)
        assert name.startswith("torch.ops.")
        assert eval(name, {"torch": torch}) is op


# -- regressions (bugs found by these tests, fixed) ------------------------------------------------------------------------------------------------


def test_buffer_donated_to_an_extern_result_is_still_freed(wr, refs):
    def fn(x):
        return (((x + 1) @ x) @ x,)

    s = wr.schedule(fn, torch.randn(4, 4))
    prog = wr.program(s)
    check_program(s, prog, refs)


# An op whose second result ATen leaves undefined (None in Python) while its fake function
# makes a tensor: cuDNN attention's logsumexp when it is not asked to compute it.
_LIB = torch.library.Library("coil_wrapper_test", "DEF")
_LIB.define("twice_and_maybe(Tensor x) -> (Tensor, Tensor)")
_LIB.impl("twice_and_maybe", lambda x: (x * 2, None), "CPU")
_LIB._register_fake("twice_and_maybe", lambda x: (torch.empty_like(x), torch.empty_like(x)))


@pytest.mark.parametrize("reuse", [True, False])
def test_an_extern_result_nothing_reads_is_never_reused(wr, refs, reuse):
    def fn(x):
        doubled, _ = torch.ops.coil_wrapper_test.twice_and_maybe(x)
        return (torch.sin(doubled) @ doubled,)  # a kernel store the size of the unread result

    x = torch.randn(8, 8)
    s = wr.schedule(fn, x, fusion=False)
    prog = wr.program(s, reuse=reuse)
    (call,) = [ln for ln in prog.lines if isinstance(ln, ExternCall) and "twice_and_maybe" in ln.op]
    assert call.results[1] is None  # dropped where it is made
    check_program(s, prog, refs)
    wr.check(fn, x, reuse=reuse, fusion=False)


def test_unused_input_is_not_held(wr, refs):
    def fn(x, unused):
        return (x + 1,)

    s = wr.schedule(fn, torch.randn(3), torch.randn(1000))
    prog = wr.program(s)
    check_program(s, prog, refs)


def test_views_do_not_outlive_their_base(wr, refs):
    def fn(x, w):
        return ((x + 1).t() @ w,)

    s = wr.schedule(fn, torch.randn(4, 3), torch.randn(4, 5))
    prog = wr.program(s)
    facts, _ = check_program(s, prog, refs, views_too=True)
    freed_bases = set(facts["killed_at"])
    alive_views = {v for v in facts["live_at_end"] if facts["view_base"].get(v) in freed_bases}
    assert not alive_views, f"views alive past their base's free: {alive_views}"


@pytest.mark.parametrize("bad", ["shape", "stride", "dtype", "device", "not a tensor"])
def test_check_inputs_rejects_inputs_the_kernels_were_not_made_for(wr, bad):
    def fn(x, y):
        return (torch.exp(x) + y,)

    x, y = torch.randn(4, 8), torch.randn(4, 8)
    call, _, prog, kernels = wr.compile(wr.schedule(fn, x, y), check_inputs=True)
    checks = [ln for ln in prog.lines if isinstance(ln, WC.CheckInput)]
    assert [c.index for c in checks] == [0, 1]
    # everything checked before the first step; the size-1 dim's stride does not matter
    assert prog.lines.index(checks[-1]) < min(i for i, ln in enumerate(prog.lines) if isinstance(ln, STEP_LINES))
    torch.testing.assert_close(call([x, y])[0], fn(x, y)[0])
    wrong = {"shape": torch.randn(4, 7), "stride": torch.randn(8, 4).t(), "dtype": y.double(),
             "device": y.to("meta"), "not a tensor": 3.0}[bad]
    with pytest.raises(ValueError, match="graph input 1 is not what this graph was compiled for"):
        call([x, wrong])
    assert all(k.calls == 1 for k in kernels.values())  # no kernel ran on the bad input


def test_check_inputs_ignores_strides_of_length_one_dims(wr):
    def fn(x):
        return (x * 2.0,)

    x = torch.randn(1, 5)
    call, *_ = wr.compile(wr.schedule(fn, x), check_inputs=True)
    odd = torch.randn(5, 3)[:1, :].contiguous().as_strided((1, 5), (999, 1))
    torch.testing.assert_close(call([odd])[0], odd * 2.0)


def _waited(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor]:
    a = torch.ops._c10d_functional.wait_tensor(x @ x)
    return (a + torch.sin(y) @ x,)


@pytest.mark.skipif(not hasattr(torch.ops._c10d_functional, "wait_tensor"), reason="torch without distributed")
def test_wait_tensor_result_keeps_its_argument_storage(wr):
    """`wait_tensor` returns its argument itself (a functional collective's result, filled when
    the wait returns), though its schema and FakeTensor say it makes a new tensor: the argument's
    storage must not go to `sin(y)`, made before the waited value's last read."""
    x, y = torch.randn(4, 4), torch.randn(4, 4)
    s = wr.schedule(_waited, x, y, fusion=False)
    prog = wr.program(s)
    wait = next(ln for ln in prog.lines if isinstance(ln, ExternCall) and "wait_tensor" in ln.op)
    donated = {ln.donor for ln in prog.lines if isinstance(ln, Reuse)}
    assert wait.args[0].name not in donated, prog.lines
    wr.check(_waited, x, y, fusion=False)


def _waited_both(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor]:
    a, b = torch.ops._c10d_functional.wait_tensors([x @ x, y @ y])
    return (a + torch.sin(y) @ x + b,)


@pytest.mark.skipif(not hasattr(torch.ops._c10d_functional, "wait_tensors"), reason="torch without wait_tensors")
def test_wait_tensors_results_keep_their_arguments_storage(wr):
    """`wait_tensors` (a coalesced collective's wait) returns the tensors of its list themselves:
    neither product's storage may go to `sin(y)` or its product, made before the waited values'
    last reads."""
    x, y = torch.randn(4, 4), torch.randn(4, 4)
    s = wr.schedule(_waited_both, x, y, fusion=False)
    prog = wr.program(s)
    lines = prog.lines
    wait = next(ln for ln in lines if isinstance(ln, ExternCall) and "wait_tensors" in ln.op)
    for arg, result in zip(wait.args[0], wait.results, strict=True):  # each result is its argument
        last_read = max(i for i, ln in enumerate(lines) if f"'{result.name}'" in repr(ln) and ln is not wait)
        taken = [i for i, ln in enumerate(lines) if isinstance(ln, Reuse) and ln.donor == arg.name]
        assert all(i > last_read for i in taken), lines
    wr.check(_waited_both, x, y, fusion=False)


def test_opaque_object_input_is_returned_as_given(wr):
    """An opaque graph input (a DTensor's DeviceMesh, saved for the backward) is bound from the
    call's arguments and returned as that very object, by both emitters."""
    layout = L.Layout(torch.device("cpu"), torch.float32, (sympy.Integer(4),), (sympy.Integer(1),))
    x = L.InputBuffer("arg0", layout, 0)
    mesh = L.ObjectInput(1, "obj1")
    out = L.ComputedBuffer("buf1", x.layout)
    p = sympy.Symbol("p0", integer=True, nonnegative=True)
    body = L.Op("mul", (L.Load("arg0", p, torch.float32), L.Constant(2.0, torch.float32)), torch.float32)
    op = L.Pointwise("op1", (), out, x.layout.size, body, p)
    s = schedule(L.LoweredGraph("g", [x, mesh], [], [op], [out, mesh]), fusion=False)
    call, _, prog, kernels = wr.compile(s)
    assert prog.lines[0] == Unpack(("arg0", "obj1"))
    obj, t = object(), torch.randn(4)
    got = call([t, obj])
    assert got[1] is obj
    torch.testing.assert_close(got[0], t * 2)
    gm = WC.emit_fx(prog.lines, kernels, prog.constants)
    assert gm(t, obj)[1] is obj


def test_a_collectives_inputs_keep_their_storage_until_its_wait(wr):
    """all_reduce(a) reads a until its wait returns (NCCL reads it on its own stream), so b, made
    between the launch and the wait with a's size, must not take a's storage; after the wait a
    new buffer may."""
    cpu, one, p = torch.device("cpu"), sympy.Integer(1), sympy.Symbol("p0", integer=True, nonnegative=True)
    layout = L.Layout(cpu, torch.float32, (sympy.Integer(64),), (one,))

    def scaled(name, src, by):
        body = L.Op("mul", (L.Load(src, p, torch.float32), L.Constant(by, torch.float32)), torch.float32)
        return L.Pointwise(f"op_{name}", (), L.ComputedBuffer(f"buf_{name}", layout), layout.size, body, p)

    x, y = L.InputBuffer("arg0", layout, 0), L.InputBuffer("arg1", layout, 1)
    a, b = scaled("a", "arg0", 2.0), scaled("b", "arg1", 3.0)
    launched, waited = L.ComputedBuffer("buf_r", layout), L.ComputedBuffer("buf_w", layout)
    c10d = torch.ops._c10d_functional
    launch = L.ExternKernel("op_r", (), c10d.all_reduce.default, (a.output, "sum", "0"), {}, launched, False)
    wait = L.ExternKernel("op_w", (), c10d.wait_tensor.default, (launched,), {}, waited, False)
    body = L.Op("add", (L.Load("buf_w", p, torch.float32), L.Load("buf_b", p, torch.float32)), torch.float32)
    c = L.Pointwise("op_c", (), L.ComputedBuffer("buf_c", layout), layout.size, body, p)
    s = schedule(L.LoweredGraph("g", [x, y], [], [a, launch, b, wait, c], [c.output]), fusion=False)
    assert [getattr(st, "name", None) for st in s.steps][1::2] == ["op_r", "op_w"]  # b runs in between
    prog = wr.program(s)
    reuses = {ln.name: ln.donor for ln in prog.lines if isinstance(ln, Reuse)}
    assert reuses.get("buf_b") != "buf_a", prog.lines
    # after the wait a's storage is free; b dies at c, which may write over it in place
    assert reuses.get("buf_c") in (None, "buf_a", "buf_b"), prog.lines


def test_a_higher_order_op_takes_its_subgraphs_as_constants(wr):
    """torch.cond's branches reach the wrapper as graph modules: each is a constant of the
    wrapper (one per module), passed to the op's call, and the program runs both ways."""

    def fn(x):
        branch = torch.cond(x.sum() > 0, lambda t: (t.sin() * 2,), lambda t: (t.cos() - 1,), (x,))[0]
        return (branch + 1, torch.cond(x.sum() > 0, lambda t: (t * 3,), lambda t: (t * 4,), (x,))[0])

    x = torch.randn(4, 8)
    s = wr.schedule(fn, x)
    prog = wr.program(s)
    modules = {name: c for name, c in prog.constants.items() if isinstance(c, torch.nn.Module)}
    assert len(modules) == 4 and len({id(c) for c in modules.values()}) == 4
    for sign in (1, -1):
        wr.check(fn, x * sign)
