"""GEMM template kernels (matmul.py): matmul groups from coil.scheduler.matmul generated, run under
the Triton interpreter, against eager PyTorch; launch configurations and variants."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import coil.lowering_ir as L
import pytest
import sympy
import torch
from coil.scheduler import (
    Schedule,
    is_matmul_group,
    matmul_candidates,
    output_buffers,
    schedule,
    with_matmul_templates,
)
from coil.triton_codegen import (
    KernelSource,
    MatmulConfig,
    generate,
    matmul_configs,
    shape_configs,
    variants,
    with_matmul_config,
)
from torch.fx.experimental.proxy_tensor import make_fx

F = torch.nn.functional
aten = torch.ops.aten


def _templated(s: Schedule) -> Schedule:
    """`s` with every matmul candidate applied; no matrix-product extern is left."""
    t = with_matmul_templates(s, matmul_candidates(s.steps, output_buffers(s.graph.outputs)))
    assert not [e for e in t.externs() if e.kernel in (aten.mm.default, aten.addmm.default, aten.bmm.default,
                                                       aten.baddbmm.default)]
    return t


def _schedule(fn: Callable[..., Any], *inputs: Any, keep_baddbmm: bool = False, fusion: bool = True) -> Schedule:
    """Trace, lower, schedule (`fusion` as `schedule`'s) and apply the templates.
    `keep_baddbmm`: coil's decomposition table without its baddbmm entry, so the graph holds a
    baddbmm extern."""
    table = L.decomposition_table()
    if keep_baddbmm:
        table = {k: v for k, v in table.items() if k is not aten.baddbmm.default}
    gm = make_fx(fn, decomposition_table=table, tracing_mode="fake")(*inputs)
    return _templated(schedule(L.lower(gm), fusion=fusion))


def _check(tk: Any, fn: Callable[..., Any], *inputs: Any, keep_baddbmm: bool = False, fusion: bool = True,
           rtol: float = 1e-5, atol: float = 1e-5, pick: Callable[[KernelSource], KernelSource] | None = None
           ) -> list[KernelSource]:
    """Run `fn`'s templated schedule and compare each output with eager `fn` (dtype, shape,
    strides, values); the kernels generated, returned."""
    s = _schedule(fn, *inputs, keep_baddbmm=keep_baddbmm, fusion=fusion)
    sources: list[KernelSource] = []
    got = tk.execute(s, inputs, sources=sources, pick=pick)
    want = fn(*inputs)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape and g.stride() == w.stride()
        torch.testing.assert_close(g, w, rtol=rtol, atol=atol)
    assert any(ks.strategy == "matmul" for ks in sources)
    return sources


# bf16 against eager's bf16: one rounding each, summation orders differ (one bf16 ulp)
BF16 = {"rtol": 1.6e-2, "atol": 1e-2}


def _tol(dtype: torch.dtype) -> dict[str, float]:
    return BF16 if dtype == torch.bfloat16 else {"rtol": 1e-5, "atol": 1e-5}


@pytest.fixture
def data() -> Callable[..., torch.Tensor]:
    torch.manual_seed(0)

    def make(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.randn(*shape).to(dtype)

    return make


# -- the products -----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_mm_with_sizes_no_block_divides(tk: Any, data: Any, dtype: torch.dtype) -> None:
    # 33 x 40 x 24 with the interpreter's 32 x 32 x 16 tiles: ragged rows, columns and K steps
    (ks,) = _check(tk, lambda a, b: (a @ b,), data(33, 24, dtype=dtype), data(24, 40, dtype=dtype), **_tol(dtype))
    assert ks.constexprs == {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16, "GROUP_M": 2}
    assert int(ks.grid) == 4 and ks.size_args == (33 * 40, 24) and ks.stores == (ks.pointer_args[-1],)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_addmm_with_a_row_bias_and_beta_alpha(tk: Any, data: Any, dtype: torch.dtype) -> None:
    def fn(bias: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (torch.addmm(bias, a, b, beta=0.5, alpha=2.0), torch.addmm(bias[:1], a, b, beta=0.0, alpha=-1.5),
                torch.addmm(bias[:, :1].expand(33, 40), a, b))

    _check(tk, fn, data(33, 40, dtype=dtype), data(33, 24, dtype=dtype), data(24, 40, dtype=dtype), **_tol(dtype))


def test_addmm_with_a_1d_bias(tk: Any, data: Any) -> None:
    _check(tk, lambda bias, a, b: (torch.addmm(bias, a, b, alpha=0.25),), data(40), data(33, 24), data(24, 40))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_bmm_and_baddbmm(tk: Any, data: Any, dtype: torch.dtype) -> None:
    a, b, bias = data(3, 33, 24, dtype=dtype), data(3, 24, 20, dtype=dtype), data(33, 20, dtype=dtype)
    (ks,) = _check(tk, lambda a, b: (torch.bmm(a, b),), a, b, **_tol(dtype))
    assert int(ks.grid) == 3 * 2 * 1
    sources = _check(tk, lambda i, a, b: (torch.baddbmm(i, a, b, beta=0.5, alpha=3.0),), bias, a, b,
                     keep_baddbmm=True, **_tol(dtype))
    assert [ks.name for ks in sources] == [sources[0].name]  # one template kernel, no decomposition


def test_transposed_operands(tk: Any, data: Any) -> None:
    # nn.Linear's weight w.t() is a stride-(1, K) view; a.t() a stride-(1, M) one; a batch of
    # transposed matrices too
    w, a, x = data(40, 24), data(24, 33), data(33, 24)
    _check(tk, lambda x, w: (F.linear(x, w),), x, w)
    _check(tk, lambda a, w: (a.t() @ w.t(),), a, w)
    _check(tk, lambda p, q: (torch.bmm(p.transpose(1, 2), q),), data(2, 24, 17), data(2, 24, 19))


# -- epilogues --------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_bias_and_erf_gelu_epilogue(tk: Any, data: Any, dtype: torch.dtype) -> None:
    x, w, b = data(33, 24, dtype=dtype), data(40, 24, dtype=dtype), data(40, dtype=dtype)
    (ks,) = _check(tk, lambda x, w, b: (F.gelu(F.linear(x, w, b)),), x, w, b, **_tol(dtype))
    assert "tl.erf(" in ks.source and len(ks.stores) == 1  # the product stays in registers
    assert ks.source.count("tl.store(") == 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_residual_add_epilogue(tk: Any, data: Any, dtype: torch.dtype) -> None:
    x, w, r = data(33, 24, dtype=dtype), data(40, 24, dtype=dtype), data(33, 40, dtype=dtype)
    (ks,) = _check(tk, lambda x, w, r: (F.linear(x, w) + r,), x, w, r, **_tol(dtype))
    assert len(ks.pointer_args) == 4  # x, w, r and the output


def test_cast_to_fp32_epilogue_reads_the_product_rounded(tk: Any, data: Any) -> None:
    # the product is bf16 in the unfused path: the epilogue reads it rounded, so the fp32 result
    # equals eager's bf16 product widened, not the fp32 accumulator
    x, w = data(33, 24, dtype=torch.bfloat16), data(40, 24, dtype=torch.bfloat16)
    (ks,) = _check(tk, lambda x, w: (F.linear(x, w).float() * 3,), x, w, **BF16)
    assert "_coil_round_bf16" in ks.source
    got = tk.execute(_schedule(lambda x, w: (F.linear(x, w).float(),), x, w), (x, w))[0]
    assert torch.equal(got, got.bfloat16().float())  # every value a bf16 one


def test_a_product_also_read_later_is_stored_too(tk: Any, data: Any) -> None:
    def fn(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = x @ w
        return (torch.relu(y) * 2, y.sum(0))

    # unfused, relu's kernel is the epilogue, and the sum's kernel reads the product after it
    sources = _check(tk, fn, data(33, 24), data(24, 40), fusion=False, rtol=1e-4, atol=1e-4)
    template = next(ks for ks in sources if ks.strategy == "matmul")
    assert len(template.stores) == 2 and template.source.count("tl.store(") == 2


def test_product_returned_and_used_by_its_epilogue(tk: Any, data: Any) -> None:
    _check(tk, lambda a, b: ((y := a @ b), y.sigmoid()), data(33, 24), data(24, 40))


def test_symbolic_sizes(tk: Any, data: Any) -> None:
    """M, N, K symbolic: they are kernel arguments, and the kernel runs at other sizes than traced."""
    gm = make_fx(lambda a, b, r: (torch.relu(a @ b) + r,), decomposition_table=L.decomposition_table(),
                 tracing_mode="symbolic")(data(5, 7), data(7, 6), data(5, 6))
    g = L.lower(gm)
    (group,) = [st for st in _templated(schedule(g)).steps if is_matmul_group(st)]  # type: ignore[arg-type]
    ks = generate(group, g.buffers(), "interpret", hints=g.symbol_hints)
    syms = sorted(g.symbol_hints, key=str)
    assert set(ks.size_args[2:]) == set(syms) and not isinstance(ks.grid, sympy.Integer)
    m, k, n = 33, 24, 40
    by_hint = {v: s for s, v in g.symbol_hints.items()}
    sizes = {by_hint[5]: m, by_hint[7]: k, by_hint[6]: n}
    a, b, r = data(m, k), data(k, n), data(m, n)
    env = {"arg0": a, "arg1": b, "arg2": r, ks.stores[0]: torch.full((m, n), float("nan"))}
    concrete = dataclasses.replace(ks, size_args=tuple(sympy.sympify(s).xreplace(sizes) for s in ks.size_args),
                                   grid=sympy.sympify(ks.grid).xreplace(sizes))
    tk.launch(concrete, env)
    torch.testing.assert_close(env[ks.stores[0]], torch.relu(a @ b) + r, rtol=1e-5, atol=1e-5)


# -- configurations ----------------------------------------------------------------------------------


@pytest.mark.parametrize("cfg", [MatmulConfig(16, 16, 16, 1, 4, 1), MatmulConfig(16, 64, 32, 4, 4, 1),
                                 MatmulConfig(64, 16, 16, 8, 4, 1)], ids=str)
def test_every_configuration_launches_the_same_text_correctly(tk: Any, data: Any, cfg: MatmulConfig) -> None:
    x, w, b = data(33, 24), data(40, 24), data(40)
    texts: set[str] = set()

    def pick(ks: KernelSource) -> KernelSource:
        texts.add(ks.source)
        return with_matmul_config(ks, cfg) if ks.matmul is not None else ks

    (ks,) = _check(tk, lambda x, w, b: (F.gelu(F.linear(x, w, b)),), x, w, b, pick=pick)
    assert ks.constexprs == cfg.constexprs and ks.source in texts
    assert int(ks.grid) == -(-33 // cfg.block_m) * -(-40 // cfg.block_n)


def test_configurations_and_variants(data: Any) -> None:
    s = _schedule(lambda x, w, b: (F.gelu(F.linear(x, w, b)),), data(33, 24, dtype=torch.bfloat16),
                  data(40, 24, dtype=torch.bfloat16), data(40, dtype=torch.bfloat16))
    (group,) = s.kernels()
    bufs = s.graph.buffers()
    interp = generate(group, bufs, "interpret")
    assert variants(interp, "interpret") == [interp]  # one configuration on the interpreter
    cuda = generate(group, bufs, "cuda")
    configs = matmul_configs(group, "cuda")
    assert cuda.constexprs == configs[0].constexprs and cuda.num_stages == configs[0].num_stages
    vs = variants(cuda, "cuda")
    assert 2 <= len(vs) <= 8 and vs[0] is cuda
    assert {v.source for v in vs} == {cuda.source}  # same text, other constexprs, warps, stages
    assert len({(tuple(v.constexprs.items()), v.num_warps, v.num_stages) for v in vs}) == len(vs)
    assert all(min(v.constexprs["BLOCK_M"], v.constexprs["BLOCK_N"], v.constexprs["BLOCK_K"]) >= 16 for v in vs)
    # a tiny product: tiles fitted to it (no 128-wide tile over 33 rows)
    assert all(v.constexprs["BLOCK_M"] <= 64 and v.constexprs["BLOCK_N"] <= 64 for v in vs)
    assert "input_precision" not in cuda.source and "tl.dot(a_tile, b_tile, acc)" in cuda.source
    assert "_coil_index" not in cuda.source


def test_cuda_configurations_of_a_large_product() -> None:
    from coil.triton_codegen import MatmulShape

    big = shape_configs(MatmulShape(1, 8192, 8192, 4096, torch.bfloat16), "cuda")
    assert (big[0].block_m, big[0].block_n, big[0].block_k) == (128, 128, 64)
    assert any((c.block_m, c.block_n, c.num_warps, c.num_stages) == (128, 256, 8, 3) for c in big)
    fp32 = shape_configs(MatmulShape(1, 8192, 8192, 4096, torch.float32), "cuda")
    assert all(c.block_k <= 64 for c in fp32) and fp32[0].block_k == 32
    small_m = shape_configs(MatmulShape(1, 8, 8192, 4096, torch.bfloat16), "cuda")
    assert all(c.block_m == 16 for c in small_m)
    with pytest.raises(ValueError):
        MatmulConfig(24, 16, 16, 1, 4, 1)


def test_fp32_products_use_ieee_precision(data: Any) -> None:
    s = _schedule(lambda a, b: (a @ b,), data(33, 24), data(24, 40))
    (group,) = s.kernels()
    assert 'input_precision="ieee"' in generate(group, s.graph.buffers(), "cuda").source


def test_indirect_reads_of_an_operand(tk: Any, data: Any) -> None:
    """A template reads an operand through a table of addresses like any kernel (a backward's
    tangent)."""
    x, w = data(33, 24), data(40, 24)
    s = _schedule(lambda x, w: (F.linear(x, w) * 2,), x, w)
    (group,) = s.kernels()
    ks = generate(group, s.graph.buffers(), "interpret", indirect={"arg0": (0, torch.float32)}, table="tbl")
    assert ks.pointer_args[0] == "tbl" and ks.name.endswith("_via0")
    out = torch.full((33, 40), float("nan"))
    tk.launch(ks, {"tbl": torch.tensor([x.data_ptr()], dtype=torch.int64), "arg1": w, ks.stores[0]: out})
    torch.testing.assert_close(out, F.linear(x, w) * 2, rtol=1e-5, atol=1e-5)
