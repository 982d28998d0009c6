"""The printer, the launch configuration, the op table and the shape of generated sources."""

from __future__ import annotations

import itertools
import math

import coil.lowering_ir as L
import coil.triton_codegen as T
import pytest
import sympy
import torch
import triton
from coil.scheduler import schedule
from coil.triton_codegen import KernelConfig, choose, generate, texpr
from coil.triton_codegen.optable import same_width_int, template, tl_dtype
from torch._subclasses.fake_tensor import FakeTensorMode

P0, P1, P2 = sympy.symbols("p0 p1 p2", integer=True, nonnegative=True)


def test_public_api_snapshot():
    assert sorted(T.__all__) == [
        "CodegenOptions", "KernelConfig", "KernelSource", "MatmulConfig", "MatmulShape", "OUTER_XBLOCK", "STRATEGIES",
        "candidates", "choose", "generate", "generate_like", "generate_matmul", "generate_schedule",
        "looped_alternatives", "matmul_configs", "other_strategy", "reread_alternative", "shape_configs", "texpr",
        "variants", "with_matmul_config",
    ]
    assert T.STRATEGIES == ("auto", "persistent", "looped", "outer")


# -- printer -------------------------------------------------------------------------------------------


PRINTABLE = [
    sympy.Integer(7),
    P0,
    2 * P0 + 3 * P1 + 1,
    sympy.Mod(P0, 3),
    sympy.Mod(P0 + 2 * P1, 4),
    sympy.floor(P0 / 3),
    sympy.floor(P1 / 4) * 2,
    sympy.Mod(sympy.floor(P0 / 2), 3) * 6 + sympy.Mod(P1, 2),
    P0**2 + P1 * P2,
    12 * P0 + sympy.floor(P1 / 4) + 7 * sympy.Mod(P2 + P0, 5),
]


@pytest.mark.parametrize("expr", PRINTABLE, ids=str)
def test_texpr_prints_integer_arithmetic_faithfully(expr):
    src = texpr(expr)
    names = sorted(s.name for s in expr.free_symbols)
    for values in itertools.product(range(7), repeat=len(names)):
        env = dict(zip(names, values, strict=True))
        want = int(expr.xreplace({sympy.Symbol(n, integer=True, nonnegative=True): v for n, v in env.items()}))
        assert eval(src, {}, dict(env)) == want, (src, env)  # Python ints: // and % floor like sympy


def test_texpr_rejects_non_integer_expressions():
    with pytest.raises(ValueError):
        texpr(P0 / 2)
    with pytest.raises(ValueError):
        texpr(sympy.Float(1.5))
    with pytest.raises(ValueError):
        texpr(sympy.sqrt(P0))


@pytest.mark.parametrize(
    ("expr", "ref"),
    [(sympy.floor((2 * P0 + P1) / 3), lambda a, b: (2 * a + b) // 3), (sympy.floor(5 * P0 / 3), lambda a, b: 5 * a // 3)],
    ids=["floor_of_sum", "floor_of_5p_over_3"],
)
def test_texpr_prints_floor_of_general_rationals(expr, ref):
    src = texpr(expr)
    for a, b in itertools.product(range(6), repeat=2):
        assert eval(src, {}, {"p0": a, "p1": b}) == ref(a, b)


def test_copying_reshape_generates(tk):
    aten = torch.ops.aten
    mode = FakeTensorMode()
    g = torch.fx.Graph()
    x = g.placeholder("x")
    with mode:
        fx_ = torch.empty_strided((2, 3), (1, 2))
        val = aten.reshape.default(fx_, [3, 2])
    assert val.untyped_storage()._cdata != fx_.untyped_storage()._cdata  # a real copy
    x.meta["val"] = fx_
    node = g.call_function(aten.reshape.default, (x, [3, 2]))
    node.meta["val"] = val
    g.output((node,))
    gm = torch.fx.GraphModule(torch.nn.Module(), g)
    s = schedule(L.lower(gm))
    inp = torch.arange(6.0).reshape(3, 2).t()
    (got,) = tk.execute(s, [inp])
    torch.testing.assert_close(got, inp.reshape(3, 2))


# -- config ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("target", ["cuda", "interpret"])
def test_choose_persistent_for_small_looped_for_large(target):
    small = choose(64, 128, True, target)
    assert small.strategy == "persistent"
    assert small.rblock >= 128
    big = choose(64, 1 << 20, True, target)
    assert big.strategy == "looped"
    assert big.rblock < 1 << 20
    for cfg in (small, big):
        assert cfg.xblock >= 1 and cfg.rblock >= 1
        assert cfg.xblock & (cfg.xblock - 1) == 0 and cfg.rblock & (cfg.rblock - 1) == 0


@pytest.mark.parametrize("target", ["cuda", "interpret"])
def test_choose_threshold_and_forced_strategies(target):
    limit = 1 << 14
    assert choose(8, limit, True, target).strategy == "persistent"
    assert choose(8, limit + 1, True, target).strategy == "looped"
    assert choose(8, 10, True, target, "looped").strategy == "looped"
    forced = choose(8, 1 << 20, True, target, "persistent")
    assert forced.strategy == "persistent" and forced.rblock >= 1 << 20
    with pytest.raises(ValueError):
        choose(8, 8, True, target, "fast")


@pytest.mark.parametrize(("xnumel", "rnumel"), [(1, 1), (3, 7), (1000, 3), (5, 100000), (1 << 20, 64)])
def test_choose_block_budget(xnumel, rnumel):
    for target in ("cuda", "interpret"):
        cfg = choose(xnumel, rnumel, True, target)
        if cfg.strategy == "persistent":
            assert cfg.rblock >= rnumel  # one block covers the whole reduction
        assert cfg.xblock <= max(1, 1 << (max(xnumel, 1) - 1).bit_length())
        pw = choose(xnumel * rnumel, 1, False, target)
        assert pw.strategy == "pointwise" and pw.rblock == 1


def test_config_is_frozen():
    cfg = KernelConfig("pointwise", 16, 1, 2)
    with pytest.raises(AttributeError):
        cfg.xblock = 32  # type: ignore[misc]


# -- op table ------------------------------------------------------------------------------------------

VALUE_OPS = sorted(n for n in L.OPS if n != "cast")  # cast is emitted inline by the kernel writer


@pytest.mark.parametrize("name", VALUE_OPS)
def test_every_value_op_has_a_cuda_template(name):
    for dtype in (torch.float32, torch.float64, torch.int32):
        t = template(name, dtype, "cuda")
        arity = L.OPS[name] or 1
        t.format(*[f"a{i}" for i in range(arity)], T=tl_dtype(dtype), I=same_width_int(dtype))


# the interpreter has no libdevice: every value op needs a template of its own there
@pytest.mark.parametrize("name", VALUE_OPS)
def test_every_value_op_has_an_interpret_template(name):
    for dtype in (torch.float32, torch.float64, torch.int32):
        t = template(name, dtype, "interpret")
        arity = L.OPS[name] or 1
        t.format(*[f"a{i}" for i in range(arity)], T=tl_dtype(dtype), I=same_width_int(dtype))


def test_inverse_trig_runs_on_the_interpreter(tk):
    x = torch.rand(6) * 1.8 - 0.9
    tk.check(lambda x: (torch.atan(x), torch.asin(x), torch.acos(x), torch.atan2(x, x + 2)), x, atol=1e-5)


# -- generated source ----------------------------------------------------------------------------------


def test_kernel_source_fields(tk):
    def fn(x, w):
        return (torch.softmax(x * w, -1), (x * w).sum(1))

    x, w = torch.randn(5, 7), torch.randn(7)
    s = tk.schedule(fn, x, w)
    (k,) = s.kernels()
    bufs = s.graph.buffers()
    for strategy in ("persistent", "looped"):
        ks = generate(k, bufs, "interpret", strategy)
        assert ks.name == k.name and ks.strategy == strategy
        assert f"def {k.name}(" in ks.source and "@triton.jit" in ks.source
        assert "libdevice" not in ks.source
        compile(ks.source, "<kernel>", "exec")
        assert set(ks.pointer_args) == {"arg0", "arg1", *k.stores}
        assert ks.stores == tuple(k.stores)
        assert ks.size_args == (k.xnumel, k.rnumel) == (5, 7)
        assert set(ks.constexprs) == {"XBLOCK", "RBLOCK"}
        assert int(ks.grid) == math.ceil(5 / ks.constexprs["XBLOCK"])
        assert set(ks.origins) == set(k.origins())
        assert ("for roffset in range" in ks.source) == (strategy == "looped")
    cuda = generate(k, bufs, "cuda", "persistent")
    assert "from triton.language.extra import libdevice" in cuda.source


def test_interpreted_loops_convert_their_run_time_bound(tk):
    # Triton before 3.9 turns a run-time int into a Python int for range() with int(array) of a
    # one-element array, which NumPy 2 refuses: interpreted kernels take the bound through
    # _coil_index, CUDA ones use it as it is
    import numpy as np

    # (symbolic sizes here; a static size is assigned in the kernel's body, which the interpreter
    # makes a tensor too: it goes through _coil_index as well)
    from coil import lowering_ir as L
    from coil.scheduler import schedule
    from torch.fx.experimental.proxy_tensor import make_fx

    gm = make_fx(lambda x: ((x * 2).sum(1),), decomposition_table=L.decomposition_table(),
                 tracing_mode="symbolic")(torch.randn(5, 7))
    s = schedule(L.lower(gm))
    (k,) = [k for k in s.kernels() if k.is_reduction]
    bufs = s.graph.buffers()
    interp = generate(k, bufs, "interpret", "looped").source
    assert "for roffset in range(0, _coil_index(rnumel), RBLOCK):" in interp
    assert "_coil_index" not in generate(k, bufs, "cuda", "looped").source
    static = tk.schedule(lambda x: ((x * 2).sum(1),), torch.randn(5, 7))
    (k,) = static.kernels()
    assert "for roffset in range(0, _coil_index(rnumel), RBLOCK):" in generate(k, static.graph.buffers(), "interpret",
                                                                                  "looped").source
    scope: dict[str, object] = {}
    exec(interp[interp.index("def _coil_index"):].split("\n\n")[0], scope)  # the helper alone
    as_interpreted = type("T", (), {"handle": type("H", (), {"data": np.array([7])})()})()
    assert scope["_coil_index"](as_interpreted) == 7 and scope["_coil_index"](9) == 9


def _hints(source: str, ptr: str) -> set[str]:
    """The eviction hints of the loads of pointer `ptr` in a kernel source ('' for none)."""
    out = set()
    for line in source.splitlines():
        if f"tl.load({ptr} +" in line:
            out.add(line.split("eviction_policy='")[1].split("'")[0] if "eviction_policy" in line else "")
    return out


def test_eviction_hints_of_a_norm(tk):
    """Layer norm over rows: looped, the input is read by the statistics' loop (kept for the
    second read) and by the normalising loop (its last read: streamed); the weight is the same
    for every row (kept); persistent, only the weight gets a hint. Both still match eager."""
    def fn(x, w):
        return (torch.nn.functional.layer_norm(x, (x.shape[-1],), w),)

    x, w = torch.randn(6, 40), torch.randn(40)
    s = tk.schedule(fn, x, w)
    (k,) = s.kernels()
    bufs = s.graph.buffers()
    looped = generate(k, bufs, "cuda", "looped")
    ptr_x, ptr_w = looped.pointer_args.index("arg0"), looped.pointer_args.index("arg1")
    assert _hints(looped.source, f"ptr{ptr_x}") == {"evict_last", "evict_first"}, looped.source
    assert _hints(looped.source, f"ptr{ptr_w}") == {"evict_last"}, looped.source
    persistent = generate(k, bufs, "cuda", "persistent")
    assert _hints(persistent.source, f"ptr{persistent.pointer_args.index('arg0')}") == {""}
    assert _hints(persistent.source, f"ptr{persistent.pointer_args.index('arg1')}") == {"evict_last"}
    for strategy in ("looped", "persistent"):
        tk.check(fn, x, w, strategy=strategy, atol=1e-5)


def test_a_whole_tensor_reduction_gets_no_keep_hint(tk):
    s = tk.schedule(lambda x: (x.sum(),), torch.randn(64))
    (k,) = s.kernels()
    ks = generate(k, s.graph.buffers(), "cuda", "looped")
    assert "evict_last" not in ks.source


def test_pointwise_source_and_grid(tk):
    s = tk.schedule(lambda x: ((x + 1) * 2,), torch.randn(100))
    (k,) = s.kernels()
    ks = generate(k, s.graph.buffers(), "cuda")
    assert ks.strategy == "pointwise" and ks.size_args == (100,)
    assert set(ks.constexprs) == {"XBLOCK"}
    assert int(ks.grid) * ks.constexprs["XBLOCK"] >= 100
    assert (int(ks.grid) - 1) * ks.constexprs["XBLOCK"] < 100
    assert "tl.int64" not in ks.source


def test_huge_tensors_index_in_int64():
    x = torch.empty(1 << 16, 1 << 16, device="meta")  # 2**32 elements, never allocated

    def fn(x):
        return (x + 1, x.sum(1))

    from torch.fx.experimental.proxy_tensor import make_fx

    gm = make_fx(fn, decomposition_table=L.decomposition_table(), tracing_mode="fake")(x)
    s = schedule(L.lower(gm), fusion=False)
    for k in s.kernels():
        ks = generate(k, s.graph.buffers(), "cuda")
        assert "tl.program_id(0).to(tl.int64)" in ks.source


@pytest.mark.parametrize("target", ["cuda", "interpret"])
def test_bool_accumulating_scatter_stores_true_without_atomics(tk, target):
    # Triton has no int1 atomics (interpreter and GPU alike): bool add is logical or, so the
    # scatter stores True where the value is True (racing writers all store the same value)
    from coil.lowering_ir import Scatter
    from coil.scheduler import scatter_groups

    def fn(x, i, v):
        return (x.index_add(0, i, v),)

    x, i, v = torch.zeros(4, dtype=torch.bool), torch.tensor([0, 2, 2]), torch.tensor([True, False, True])
    s = tk.schedule(fn, x, i, v)
    (op,) = [st for st in s.steps if isinstance(st, Scatter)]
    _, scatter = (generate(g, s.graph.buffers(), target) for g in scatter_groups(op))
    assert "atomic" not in scatter.source
    assert "tl.store(" in scatter.source


def test_a_pointwise_store_broadcasts_only_a_constant_value(tk):
    """A value read from memory already has the block's shape: stored as it is; a constant (here
    `full_like`, fused beside it) is broadcast by subtracting a zero (keeping -0.0). Both equal
    eager under the interpreter."""
    def fn(x):
        return x.sin() * 2, torch.full_like(x, -0.0), torch.full_like(x, 3.0) + 1

    x = torch.randn(6, 40)
    sources: list = []
    tk.check(fn, x, sources=sources)
    stores = [ln.strip() for ks in sources for ln in ks.source.splitlines() if ln.strip().startswith("tl.store(")]
    assert len(stores) == 3, stores
    from_memory = [s for s in stores if "- xindex * 0" not in s]
    assert len(from_memory) == 1, stores


@pytest.mark.xfail(tuple(int(p) for p in triton.__version__.split(".")[:2]) < (3, 9), strict=True,
                   reason="Triton 3.6's interpreter makes every -0.0 constant +0.0, tl.full's too (upstream)")
def test_a_broadcast_negative_zero_keeps_its_sign(tk):
    """The constant broadcast by subtracting a zero stays -0.0 (x - 0 keeps the sign; x + 0 would
    not), as eager's full_like(x, -0.0) is."""
    got = tk.run(lambda x: (torch.full_like(x, -0.0),), torch.randn(6, 40))
    assert torch.signbit(got[0]).all()
