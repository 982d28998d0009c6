"""Generated kernels, run under the Triton interpreter, against eager PyTorch."""

from __future__ import annotations

import coil.triton_codegen.kernel as kernel_mod
import pytest
import torch
from coil.triton_codegen import KernelConfig

F = torch.nn.functional


@pytest.fixture
def small_blocks(monkeypatch):
    """Force tiny blocks so that every loop runs several iterations with ragged tails."""
    real = kernel_mod.choose

    def choose(xnumel, rnumel, is_reduction, target, strategy="auto", x_contiguous=False):
        cfg = real(xnumel, rnumel, is_reduction, target, strategy, x_contiguous)
        if cfg.strategy == "pointwise":
            return KernelConfig("pointwise", 4, 1, cfg.num_warps)
        if cfg.strategy in ("looped", "outer"):
            return KernelConfig(cfg.strategy, 2, 4, cfg.num_warps)
        return KernelConfig("persistent", 2, cfg.rblock, cfg.num_warps)

    monkeypatch.setattr(kernel_mod, "choose", choose)


# -- pointwise --------------------------------------------------------------------------------------


def test_pointwise_chain_with_broadcast_and_ragged_size(tk, small_blocks):
    def fn(x, b, c):
        return ((x * b + c).exp() - 1, torch.where(x > 0, x, b * 0.5), (x + 1).t() * 2)

    torch.manual_seed(0)
    x, b, c = torch.randn(5, 7), torch.randn(7), torch.randn(5, 1)  # 35 elements: 4 does not divide
    sources = []
    tk.check(fn, x, b, c, sources=sources)
    assert sources and all(s.strategy == "pointwise" for s in sources)
    assert all(s.constexprs == {"XBLOCK": 4} for s in sources)


def test_pointwise_math_matches_eager(tk):
    def fn(x, y, p):
        return (
            x.abs(), x.sign(), x.round(), x.trunc(), x.frac(), x.floor(), x.ceil(), x.tanh(),
            x.sigmoid(), x.erf(), torch.erfc(x), x.sin(), x.cos(), x.sinh(), x.cosh(), torch.asinh(x),
            torch.exp2(x), torch.expm1(x), p.log(), p.log2(), p.log10(), p.log1p(), p.rsqrt(),
            p.reciprocal(), torch.acosh(p + 1), x / y, torch.remainder(x, y), torch.fmod(x, y),
            torch.floor_divide(x, y), torch.div(x, y, rounding_mode="trunc"), p ** 3, p ** -2,
            p ** 0.5, p ** 2.5, torch.pow(p, y), torch.maximum(x, y), torch.minimum(x, y),
            x.clamp(-1, 1),
        )

    torch.manual_seed(0)
    x = torch.randn(13) * 3
    x[:5] = torch.tensor([2.5, -2.5, 0.5, -0.5, 1.5])  # round-half-even cases
    y = torch.randn(13) + torch.where(torch.rand(13) > 0.5, 1.0, -1.0)
    p = torch.rand(13) * 3 + 0.1
    tk.check(fn, x, y, p, rtol=1e-4, atol=1e-5)


def test_integer_and_bool_ops_match_eager(tk):
    def fn(a, b, x):
        return (
            a // b, a % b, torch.fmod(a, b), torch.div(a, b, rounding_mode="trunc"), a / b, a.abs(),
            a & b, a | b, a ^ b, ~a, -a, torch.maximum(a, b), a.sign(), a * b + 3,
            torch.bitwise_left_shift(a, b.abs()), torch.bitwise_right_shift(a, b.abs()),
            x > 0, (x > 0) & (a > 0), torch.logical_xor(x > 0, a), ~(x > 0), x.isnan(), x.isinf(),
            x.to(torch.int32), x.to(torch.int8), (x > 0).to(torch.float32), x.to(torch.bool),
            x.half(), x.double(), a.to(torch.float32) + 0.5,
        )

    a = torch.tensor([7, -7, 7, -7, 6, 0, 13, -13, 1])
    b = torch.tensor([2, 2, -2, -2, 3, -5, 4, 4, -1])
    x = torch.tensor([1.5, -2.7, 0.0, float("inf"), float("nan"), -0.2, 3.9, -3.9, 100.0])
    tk.check(fn, a, b, x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_signbit_and_negation_keep_the_sign_of_zeros_and_nans(tk, dtype):
    # op "signbit" reinterprets the register's bits: -0.0 and a NaN with its sign bit set are
    # negative, as in eager (a comparison sees neither). A computed NaN's sign is compared in the
    # 32/64-bit types only: eager rounds a half-type product to the canonical positive NaN, coil
    # keeps it in a float32 register (lowering-ir pointwise_ieee.py)
    wide = dtype in (torch.float32, torch.float64)

    # -x is written as a product: Triton before 3.9 negates a float as 0 - x, giving +0.0 for -(0.0)
    # (a negated NaN's sign is not compared: a product leaves it to the hardware)
    def fn(x, y):
        return (torch.signbit(x), torch.copysign(y, x), -x[:6]) + ((torch.signbit(x * 2),) if wide else ())

    nan = torch.tensor(float("nan"))
    x = torch.stack([torch.tensor(v) for v in (0.0, -0.0, 1.5, -1.5, float("inf"), float("-inf"))] + [nan, -nan])
    assert torch.signbit(x[-1]) and not torch.signbit(x[-2])  # the oracle has both NaN signs
    x = x.to(dtype)
    y = torch.arange(1, 9).to(dtype)
    want = fn(x, y)
    got = tk.run(fn, x, y)
    for g, w in zip(got, want, strict=True):
        assert torch.equal(torch.signbit(g), torch.signbit(w))
        torch.testing.assert_close(g, w, rtol=0, atol=0, equal_nan=True)


def test_half_math_runs_in_float32_registers(tk):
    def fn(x):
        return ((x * 3 + 1).exp(), x.float() / 3)

    x = (torch.randn(4, 5) * 0.5).half()
    tk.check(fn, x, rtol=2e-3, atol=2e-3)


def test_bfloat16_casts_round_to_nearest_even_exactly(tk):
    # Triton's interpreter truncates float32 -> bfloat16; casts.py rounds first (CUDA rounds to
    # nearest even natively): results equal eager's bit for bit, stores included
    def fn(x):
        return ((x * 100).to(torch.bfloat16), x.bfloat16() * 2, x.to(torch.bfloat16) + 1)

    torch.manual_seed(0)
    x = torch.randn(64)
    # ties: 1 + 2**-8 (round down to even), 1 + 3 * 2**-8 (up to even), their negatives; an overflow
    x[:6] = torch.tensor([1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-8), -(1 + 3 * 2**-8), 3.4e38, float("nan")])
    tk.check(fn, x, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.float64])
@pytest.mark.parametrize("half", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_casts_to_half_go_through_float32_as_eager(tk, dtype, half):
    # eager builds c10::BFloat16/Half from a float: an int64 or float64 is rounded twice (to
    # float32, then to the half type); the interpreter reinterpreted the bits of a non-float32 source
    def fn(x):
        return (x.to(half), x.to(half) * 3)

    vals = [16777217, 2**24 + 2**16 + 1, 16843009, 65793, 257, -(2**31), 2**31 - 1, 0, -3, 2049]
    x = torch.tensor(vals, dtype=torch.int64).to(dtype)
    if dtype == torch.float64:
        x = x + torch.tensor([2.0**-30] * len(vals), dtype=torch.float64)  # below float32 precision
    tk.check(fn, x, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.float32])
def test_cuda_bfloat16_casts_from_ints_round_on_the_float32_bits(dtype):
    # on CUDA, Triton merges `.to(tl.float32).to(tl.bfloat16)` from an int register into one
    # rounding (16842753 becomes 16908288, eager gives 16777216); such casts use the bit rounding
    # (a GPU run of tests-integration's test_int_to_bfloat16_matches_eager is the oracle);
    # a float32 source keeps Triton's own round-to-nearest-even conversion (a float64 one is
    # cast to float32 by its own op first, so it is a float32 source here too)
    import coil.lowering_ir as L
    from coil.scheduler import schedule
    from coil.triton_codegen import generate_schedule
    from torch.fx.experimental.proxy_tensor import make_fx

    x = torch.arange(7).to(dtype)
    gm = make_fx(lambda t: (t.bfloat16(),), decomposition_table=L.decomposition_table(), tracing_mode="fake")(x)
    s = schedule(L.lower(gm))
    (kernel,) = generate_schedule(s, s.graph.buffers(), "cuda")
    rounded_on_bits = "_coil_round_bf16(" in kernel.source.split("# kernel ")[-1]
    assert rounded_on_bits == (dtype != torch.float32)
    assert ("def _coil_round_bf16" in kernel.source) == rounded_on_bits


def test_arange_in_bfloat16_within_one_ulp_of_eager(tk):
    # coil computes start + step * i in float64 and rounds once; eager's vectorised CPU kernel
    # rounds its partial sums to bfloat16 (no exact formula reproduces it), so up to one bfloat16
    # ulp (2**-7 relative) apart (the interpreter's own casts would reinterpret bits: casts.py)
    def fn(x):
        return (torch.arange(0, 300, 1.7, dtype=torch.bfloat16) + x, torch.arange(5, 90, 0.37, dtype=torch.bfloat16))

    tk.check(fn, torch.zeros((), dtype=torch.bfloat16), rtol=2**-7, atol=0)


def test_iota_and_constants(tk):
    def fn(x):
        return (x + torch.arange(6), torch.full((2, 6), 2.5) * x[:2], x * float("inf"))

    tk.check(fn, torch.randn(3, 6))


# -- reductions --------------------------------------------------------------------------------------

RED_CASES = {
    "sum_last": lambda x: (x.sum(-1),),
    "sum_dim0": lambda x: (x.sum(0),),
    "sum_keep_bcast": lambda x: (x - x.sum(1, keepdim=True),),
    "amax_amin": lambda x: (x.amax(1), x.amin(0)),
    "var_mean": lambda x: tuple(torch.var_mean(x, 1)),
    "var_mean_dim0": lambda x: tuple(torch.var_mean(x, 0, correction=0)),
    "softmax": lambda x: (torch.softmax(x, -1),),
    "softmax_dim0": lambda x: (torch.softmax(x, 0),),
    "log_softmax": lambda x: (torch.log_softmax(x, -1),),
    "layer_norm": lambda x: (F.layer_norm(x, (7,)),),
    "prod": lambda x: (x.prod(1),),
    "any_all": lambda x: ((x > 1).any(1), (x > -2).all(1)),
    "int_sum": lambda x: ((x * 10).to(torch.int32).sum(1), (x > 0).sum(0)),
    "full_sum": lambda x: (x.sum(), x.amax()),
}


@pytest.mark.parametrize("strategy", ["persistent", "looped", "outer"])
@pytest.mark.parametrize("case", sorted(RED_CASES))
def test_reduction_strategies_match_eager(tk, small_blocks, no_combos, case, strategy):
    fn = RED_CASES[case]
    torch.manual_seed(1)
    x = torch.randn(5, 7)  # neither 2 (XBLOCK) nor 4 (looped RBLOCK) divides these
    sources = []
    tk.check(fn, x, strategy=strategy, sources=sources, rtol=1e-4, atol=1e-5)
    reds = [s for s in sources if s.strategy != "pointwise"]
    assert reds and all(s.strategy == strategy for s in reds)


def test_three_d_reductions_over_inner_and_outer_dims(tk, small_blocks):
    def fn(x):
        return (x.sum((0, 2)), x.permute(2, 0, 1).amax(-1), x.mean(1, keepdim=True) * x)

    x = torch.randn(3, 4, 5)
    for strategy in ("persistent", "looped"):
        tk.check(fn, x, strategy=strategy, rtol=1e-4, atol=1e-5)


def test_looped_reduction_over_several_real_blocks(tk, monkeypatch):
    """rnumel 5000 > the interpreter's 4096 RBLOCK cap: two iterations with a ragged tail."""
    monkeypatch.setenv("COIL_SPLIT_REDUCTION_MIN", str(1 << 30))  # one kernel, not split

    def fn(x):
        return (x.sum(1), torch.softmax(x, -1))

    x = torch.randn(3, 5000)
    sources = []
    tk.check(fn, x, strategy="looped", sources=sources, rtol=1e-4, atol=1e-5)
    (ks,) = sources
    assert ks.constexprs["RBLOCK"] < 5000 and 5000 % ks.constexprs["RBLOCK"]


def test_reduction_over_a_size_one_dim(tk):
    def fn(x):
        return (x.sum(1), torch.softmax(x, 1), x.amax(1, keepdim=True) + x)

    tk.check(fn, torch.randn(4, 1))


def test_reduction_with_extern_between_kernels(tk):
    def fn(x, w):
        h = torch.softmax(x @ w, -1)
        return (h.sum(0), torch.cumsum(h, 1) * 2)

    tk.check(fn, torch.randn(5, 3), torch.randn(3, 6), rtol=1e-4, atol=1e-5)


def test_fusion_off_matches_too(tk):
    def fn(x):
        return (F.layer_norm(x * 2, (7,)) + 1,)

    tk.check(fn, torch.randn(5, 7), fusion=False, rtol=1e-4, atol=1e-5)


# -- bugs ---------------------------------------------------------------------------------------------


def test_maximum_minimum_clamp_propagate_nan(tk):
    def fn(x, y):
        return (torch.maximum(x, y), torch.minimum(x, y), x.clamp(0, 0.5))

    x = torch.tensor([float("nan"), 1.0, -1.0, 0.3])
    y = torch.tensor([0.0, float("nan"), 0.0, 0.0])
    tk.check(fn, x, y)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("strategy", ["persistent", "looped"])
def test_amax_amin_propagate_nan(tk, strategy, dtype):
    # a NaN first, last and in the middle of rows, a row of infinities, a clean row (float64
    # reduces through its own path: KernelWriter.final)
    nan, inf = float("nan"), float("inf")
    x = torch.tensor([[nan, 1.0, -1.0], [2.0, 3.0, 1.0], [-inf, inf, nan], [5.0, nan, 7.0], [-inf, -inf, -inf]],
                     dtype=dtype)
    tk.check(lambda x: (x.amax(1), x.amin(1)), x, strategy=strategy)


def test_pow_negative_base_fractional_exponent_is_nan(tk):
    x = torch.tensor([-8.0, -2.0, 2.0, 0.5])
    tk.check(lambda x: (torch.pow(x, 1.5),), x)


def test_pow_negative_base_negative_odd_exponent(tk):
    x = torch.tensor([-2.0, -3.0, 2.0, 0.5])
    tk.check(lambda x: (torch.pow(x, -5.0),), x)


def test_pow_negative_base_positive_integer_exponents(tk):
    x = torch.tensor([-2.0, -3.0, 2.0, 0.5, 0.0])
    tk.check(lambda x: (torch.pow(x, 5.0), torch.pow(x, 6.0), x ** 3), x)
