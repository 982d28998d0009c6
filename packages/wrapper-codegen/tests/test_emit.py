"""emit_line covers every Line type; pyrepr round-trips literals; emit_python's module shape."""

from __future__ import annotations

import ast
import math
import typing

import pytest
import torch
from coil.wrapper_codegen import (
    TRACKER,
    Allocate,
    Arena,
    CheckInput,
    ExternCall,
    Free,
    KernelCall,
    Line,
    Place,
    Ref,
    Return,
    Reuse,
    SizeOf,
    Track,
    Unpack,
    View,
    emit_line,
    emit_python,
    pyrepr,
)

CPU = torch.device("cpu")


def one_of_each():
    """One instance of every Line type, forming a small program that runs."""
    return [
        Unpack(("a", None, "b")),
        SizeOf("n_a", "a", 0),
        CheckInput("b", 2, (2, 3), (3, 1), torch.float32, CPU),
        Allocate("buf0", (2, 3), (3, 1), torch.float32, CPU),
        KernelCall("k0", (2, 1, 1), ("a", "buf0"), (6,)),
        Track("stepped"),
        View("v0", "buf0", (3, 2), (1, 3), 0),
        ExternCall("torch.ops.aten.mm.default", (Ref("v0"), Ref("b")), (), Ref("buf1"), (("buf1", (3, 3), (3, 1)),)),
        Free("a"),
        Reuse("buf2", "buf0", (6,), (1,)),
        ExternCall("torch.ops.aten.sort.default", (Ref("buf1"),), (("dim", 0), ("descending", True)),
                   (Ref("buf3"), None), ()),
        Arena("arena0", 512, CPU, (torch.float32, torch.int32)),
        Place("buf4", "arena0", 256, (2, 2), (1, 2), torch.int32),
        ExternCall("torch.ops.aten.fill_.Scalar", (Ref("buf4"), 7), (), None, ()),
        Free("arena0_float32"),
        Free("arena0_int32"),
        Free("arena0"),
        Return((Ref("buf1"), Ref("buf2"), Ref("buf3"), Ref("n_a"), None, Ref("buf4"))),
    ]


def test_every_line_type_is_emitted_and_runs():
    classes = set(typing.get_args(Line))
    lines = one_of_each()
    assert {type(ln) for ln in lines} == classes  # the sample really covers every Line type
    body = []
    for ln in lines:
        out = emit_line(ln)
        assert out and all(isinstance(s, str) for s in out)
        ast.parse("\n".join(out))  # each line alone is valid Python
        body.extend(out)
    src = emit_python(lines, ["k0"], [], "every line")
    ast.parse(src)
    events = []
    ns = {TRACKER: type("Recorder", (), {"stepped": lambda self: events.append("stepped")})()}
    exec(compile(src, "<wrapper>", "exec"), ns)
    launched = []

    def k0(grid, a, buf, n):
        launched.append(grid)
        buf.view(-1).copy_(a[:n])

    call = ns["make"](CPU, {}, {"k0": k0})
    a = torch.arange(6.0)
    b = torch.randn(2, 3)
    args = [a, torch.zeros(1), b]
    buf1, buf2, buf3, seven, none, buf4 = call(args)
    assert args == []
    assert launched == [(2, 1, 1)] and events == ["stepped"]
    v0 = a.reshape(2, 3).t()
    torch.testing.assert_close(buf1, v0 @ b)
    assert buf2.shape == (6,) and buf2.data_ptr() != 0
    torch.testing.assert_close(buf3, torch.sort(buf1, dim=0, descending=True)[0])
    assert seven == 6 and none is None  # SizeOf bound n_a = a.size(0)
    # placed 256 bytes into its arena, seen as int32 with its own strides
    assert buf4.dtype == torch.int32 and buf4.stride() == (1, 2) and buf4.storage_offset() == 64
    assert buf4.untyped_storage().nbytes() == 512 and buf4.tolist() == [[7, 7], [7, 7]]


def test_emit_line_rejects_non_lines():
    with pytest.raises(TypeError):
        emit_line("x = 1")  # type: ignore[arg-type]


def test_unpack_edge_cases():
    assert emit_line(Unpack(())) == ["pass", "args.clear()"]
    (first, _) = emit_line(Unpack(("only",)))
    ns = {"args": [5]}
    exec(first, ns)
    assert ns["only"] == 5
    (first, _) = emit_line(Unpack((None, "b")))
    ns = {"args": [1, 2]}
    exec(first, ns)
    assert ns["b"] == 2


def test_ensure_layout_copies_only_when_needed():
    src = emit_python([Unpack(()), Return(())], [], [], "t")
    ns = {}
    exec(src, ns)
    ensure = ns["ensure_layout"]
    t = torch.randn(3, 4)
    assert ensure(t, (3, 4), (4, 1)) is t
    fixed = ensure(t.t(), (4, 3), (3, 1))
    assert fixed.stride() == (3, 1)
    torch.testing.assert_close(fixed, t.t())
    one = torch.randn(1, 1)
    assert ensure(one, (1, 1), (7, 7)) is one  # a single element has no meaningful strides


def test_emit_python_binds_kernels_and_constants():
    src = emit_python([Unpack(("x",)), Return((Ref("x"), Ref("c0")))], ["kern_a"], ["c0"], "title here")
    assert src.startswith("# coil wrapper for title here")
    ns = {}
    exec(src, ns)
    c = torch.ones(2)
    call = ns["make"](CPU, {"c0": c}, {"kern_a": object()})
    x = torch.zeros(1)
    got = call([x])
    assert got[0] is x and got[1] is c


# -- pyrepr ----------------------------------------------------------------------------------------------

LITERALS = [
    0, -7, 2**70, True, False, None, 1.5, -0.0, 1e-300, 3.141592653589793, float("inf"), float("-inf"),
    "text", "it's \"quoted\"\n", torch.float32, torch.bfloat16, torch.int64, torch.bool, torch.device("cpu"),
    torch.device("cuda", 1), torch.device("meta"), torch.contiguous_format, torch.channels_last,
    torch.strided, (), (1,), (1, 2.5, None), [], [1, [2, (3,)]], {"a": 1, "b": [torch.float16, (2,)]},
    torch.Size([2, 3]),
]


@pytest.mark.parametrize("value", LITERALS, ids=repr)
def test_pyrepr_round_trips(value):
    src = pyrepr(value)
    back = eval(src, {"torch": torch})
    assert back == value
    assert type(back) is type(value) or (isinstance(value, torch.Size) and back == tuple(value))
    if isinstance(value, float):
        assert math.copysign(1.0, back) == math.copysign(1.0, value)


@pytest.mark.parametrize("value", [1j, 1 + 2j, complex(-0.0, 2.5), complex(float("inf"), -1.0)], ids=repr)
def test_pyrepr_complex_round_trips(value):
    # the 1j that polar's backward passes to an ATen fallback
    back = eval(pyrepr(value), {"torch": torch})
    assert type(back) is complex and back == value
    assert math.copysign(1.0, back.real) == math.copysign(1.0, value.real)


def test_pyrepr_complex_nan():
    back = eval(pyrepr(complex(float("nan"), 1.0)))
    assert math.isnan(back.real) and back.imag == 1.0


def test_pyrepr_nan_and_refs():
    assert math.isnan(eval(pyrepr(float("nan"))))
    src = pyrepr([Ref("buf3"), (Ref("x"), 2), {"k": Ref("y")}])
    assert eval(src, {"buf3": "B", "x": "X", "y": "Y"}) == ["B", ("X", 2), {"k": "Y"}]


@pytest.mark.parametrize("bad", [object(), torch.ones(1), b"bytes"], ids=lambda v: type(v).__name__)
def test_pyrepr_rejects_what_it_cannot_write(bad):
    with pytest.raises(TypeError):
        pyrepr(bad)


def test_pyrepr_prints_size_expressions_as_integer_arithmetic():
    import sympy

    s0, s1 = sympy.symbols("s0 s1", integer=True, positive=True)
    for expr in (s0, 2 * s0 + 1, s0 * s1 - 3, sympy.Mod(s0, 4) + sympy.floor(s1 / 2)):
        src = pyrepr((expr, [expr]))
        for a in range(1, 6):
            for b in range(1, 4):
                want = int(expr.xreplace({s0: a, s1: b}))
                assert eval(src, {}, {"s0": a, "s1": b}) == (want, [want])
