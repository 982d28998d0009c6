"""coil::attention and coil::attention_backward against attention written out in fp64 here.

CPU tests run the Triton kernels under the interpreter (16 x 16 tiles, so the small shapes
below cross tile edges, partial tiles and several query blocks). GPU tests (`-m gpu`) run
larger bf16 shapes against the same fp64 oracle and inside a CUDA graph.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch
from coil.runtime import attention as attn
from coil.runtime.attention_config import (
    AttentionVariant,
    TileConfig,
    backward_config,
    forward_config,
)

CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def _interpreter_version(specs: Any, request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("gpu") is None and specs.triton_version() < (3, 9):
        pytest.skip("Triton < 3.9 interpreter: range() over a run-time int fails with NumPy 2")


def oracle(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None,
           keep: torch.Tensor | None, alibi: torch.Tensor | None, scale: float, causal: bool,
           window: int, softcap: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, lse) of the contract in fp64, differentiable; rows with no visible key give 0, -inf."""
    group = q.shape[1] // k.shape[1]
    q64, k64, v64 = q.double(), k.double().repeat_interleave(group, 1), v.double().repeat_interleave(group, 1)
    s = torch.einsum("bhid,bhjd->bhij", q64, k64) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    sq, sk = q.shape[2], k.shape[2]
    i = torch.arange(sq, device=q.device)[:, None]
    j = torch.arange(sk, device=q.device)[None, :]
    if alibi is not None:
        s = s + (alibi[:, None, None] * (j - i).float()).to(q.dtype).double()
    if bias is not None:
        s = s + bias.double()
    allowed = torch.ones(sq, sk, dtype=torch.bool, device=q.device)
    if causal:
        allowed = allowed & (j <= i)
    if window > 0:
        allowed = allowed & (j > i - window)
    if keep is not None:
        allowed = allowed & keep
    s = s.masked_fill(~allowed, float("-inf"))
    dead = torch.isneginf(s).all(-1, keepdim=True)
    s = s.masked_fill(dead, 0.0)
    p = torch.softmax(s, -1).masked_fill(dead, 0.0)
    lse = torch.logsumexp(s, -1).masked_fill(dead[..., 0], float("-inf"))
    return p @ v64, lse


@dataclass
class Case:
    """One call's sizes and score modifications (the bias/keep shapes broadcast to B,H,Sq,Sk)."""

    batch: int = 1
    heads: int = 2
    kv_heads: int = 2
    sq: int = 37
    sk: int = 37
    d: int = 16
    bias: tuple[int, ...] | None = None
    bias_expand: bool = False  # the bias is a stride-0 expand of `bias` to (B, H, Sq, Sk)
    bias_dtype: torch.dtype = torch.float32
    keep: tuple[int, ...] | None = None
    alibi: bool = False
    causal: bool = False
    window: int = 0
    softcap: float = 0.0
    lse_grad: bool = False
    seq_major: bool = False  # q, k, v as (B, S, H, D) tensors transposed (non-contiguous)
    extra: dict[str, Any] = field(default_factory=dict)


CASES = {
    "plain_sq_ne_sk_d40": Case(sq=20, sk=37, d=40),
    "gqa_4_2_seq_major": Case(heads=4, kv_heads=2, seq_major=True),
    "gqa_4_1_causal": Case(heads=4, kv_heads=1, causal=True),
    "causal_sq_lt_sk": Case(sq=20, sk=45, causal=True),
    "window": Case(sq=40, sk=40, window=5),
    "causal_window": Case(causal=True, window=19),
    "alibi_softcap_gqa": Case(heads=4, kv_heads=2, alibi=True, softcap=3.0),
    "bias_1hss": Case(batch=2, bias=(1, 2, 37, 37)),
    "bias_b11s_causal": Case(batch=2, bias=(2, 1, 1, 37), causal=True),
    "bias_expand_stride0": Case(batch=2, bias=(2, 1, 1, 37), bias_expand=True),
    "bias_2d_fp16": Case(sq=20, sk=33, bias=(20, 33), bias_dtype=torch.float16),
    "keep_b1ss_causal": Case(batch=2, keep=(2, 1, 37, 37), causal=True),
    "keep_bias_alibi": Case(batch=2, keep=(2, 1, 1, 37), bias=(1, 2, 37, 37), alibi=True),
    "softcap_bias_window": Case(bias=(1, 2, 37, 37), softcap=2.0, window=7),
    "lse_grad_d24": Case(d=24, lse_grad=True, causal=True),
}


def make_inputs(case: Case, dtype: torch.dtype = torch.float32, device: torch.device = CPU,
                seed: int = 0) -> dict[str, Any]:
    gen = torch.Generator().manual_seed(seed)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen).to(device=device, dtype=dtype)

    if case.seq_major:
        q = randn(case.batch, case.sq, case.heads, case.d).transpose(1, 2)
        k = randn(case.batch, case.sk, case.kv_heads, case.d).transpose(1, 2)
        v = randn(case.batch, case.sk, case.kv_heads, case.d).transpose(1, 2)
    else:
        q = randn(case.batch, case.heads, case.sq, case.d)
        k = randn(case.batch, case.kv_heads, case.sk, case.d)
        v = randn(case.batch, case.kv_heads, case.sk, case.d)
    bias = keep = alibi = None
    if case.bias is not None:
        bias = randn(*case.bias).to(case.bias_dtype).requires_grad_()
    if case.keep is not None:
        keep = (torch.rand(*case.keep, generator=gen) > 0.3).to(device)
    if case.alibi:
        alibi = (torch.rand(case.heads, generator=gen) * 0.5).to(device)
    return {"q": q.requires_grad_(), "k": k.requires_grad_(), "v": v.requires_grad_(),
            "bias": bias, "keep": keep, "alibi": alibi, "scale": case.d ** -0.5,
            "causal": case.causal, "window": case.window, "softcap": case.softcap}


def _call(fn: Any, a: dict[str, Any], case: Case) -> tuple[torch.Tensor, torch.Tensor]:
    bias = a["bias"]
    if bias is not None and case.bias_expand:
        bias = bias.expand(a["q"].shape[0], a["q"].shape[1], a["q"].shape[2], a["k"].shape[2])
    out, lse = fn(a["q"], a["k"], a["v"], bias, a["keep"], a["alibi"], a["scale"], a["causal"],
                  a["window"], a["softcap"])
    return out, lse


def _grads(out: torch.Tensor, lse: torch.Tensor, a: dict[str, Any], case: Case,
           seed: int = 1) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    g_out = torch.randn(out.shape, generator=gen).to(out.device, torch.float64)
    loss = (out.double() * g_out).sum()
    if case.lse_grad:
        g_lse = torch.randn(lse.shape, generator=gen).to(lse.device, torch.float64)
        loss = loss + (lse.double().nan_to_num(0.0, 0.0, 0.0) * g_lse).sum()
    inputs = [a["q"], a["k"], a["v"]] + ([a["bias"]] if a["bias"] is not None else [])
    return list(torch.autograd.grad(loss, inputs))


def _close_to_max(name: str, got: torch.Tensor, want: torch.Tensor, tol: float) -> None:
    """max |got - want| <= tol * max |want| (the bf16 criterion: rounding scales with the
    tensor's magnitude, not with each element's)."""
    err = float((got.double() - want.double()).abs().max())
    scale = float(want.double().abs().max())
    assert err <= tol * max(scale, 1e-6), f"{name}: max error {err:.3g}, max |want| {scale:.3g}"


def check_case(case: Case, dtype: torch.dtype = torch.float32, device: torch.device = CPU,
               atol: float = 5e-5, rtol: float = 1e-4, normalized: bool = False) -> None:
    """The op's out, lse and gradients against `oracle`: elementwise within atol/rtol, or with
    `normalized` each tensor within rtol of its largest magnitude."""
    a = make_inputs(case, dtype, device)
    out, lse = _call(torch.ops.coil.attention, a, case)
    assert out.dtype == dtype and out.is_contiguous() and lse.dtype == torch.float32
    want_out, want_lse = _call(oracle, a, case)
    # lse is fp32 whatever the inputs' dtype
    torch.testing.assert_close(lse.double(), want_lse, atol=max(atol, 1e-6), rtol=max(rtol, 1e-6))
    got = [out, *_grads(out, lse, a, case)]
    want = [want_out, *_grads(want_out, want_lse, a, case)]
    for name, g, w in zip(("out", "dq", "dk", "dv", "dbias")[:len(got)], got, want, strict=True):
        assert torch.isfinite(g).all(), name
        if normalized:
            _close_to_max(name, g, w, rtol)
        else:
            scale = 1 if name == "out" else 4
            torch.testing.assert_close(g.double(), w.double(), atol=atol * scale,
                                       rtol=rtol * scale, msg=lambda m, name=name: f"{name}: {m}")


@pytest.mark.parametrize("name", list(CASES))
def test_matches_fp64_oracle(name: str) -> None:
    check_case(CASES[name])


def test_float16_and_bfloat16() -> None:
    check_case(Case(heads=2, kv_heads=1, causal=True), torch.float16, atol=4e-3, rtol=1e-2)
    check_case(Case(bias=(1, 2, 37, 37), alibi=True), torch.bfloat16, atol=3e-2, rtol=3e-2)


def test_float64_reference_path() -> None:
    check_case(Case(heads=4, kv_heads=2, bias=(1, 4, 37, 37), softcap=2.0, causal=True),
               torch.float64, atol=1e-10, rtol=1e-10)


def test_fully_masked_rows_give_zero_and_minus_inf() -> None:
    case = Case(batch=2, keep=(2, 1, 37, 37))
    a = make_inputs(case)
    a["keep"][0, 0, 3] = False  # one row, and a whole query tile of the second batch
    a["keep"][1, 0, 16:32] = False
    out, lse = _call(torch.ops.coil.attention, a, case)
    assert (out[0, :, 3] == 0).all() and (out[1, :, 16:32] == 0).all()
    assert torch.isneginf(lse[0, :, 3]).all() and torch.isneginf(lse[1, :, 16:32]).all()
    check_case_from(a, case, out, lse)


def check_case_from(a: dict[str, Any], case: Case, out: torch.Tensor, lse: torch.Tensor) -> None:
    want_out, want_lse = _call(oracle, a, case)
    torch.testing.assert_close(out.double(), want_out, atol=5e-5, rtol=1e-4)
    torch.testing.assert_close(lse.double(), want_lse, atol=5e-5, rtol=1e-4)
    for g, w in zip(_grads(out, lse, a, case), _grads(want_out, want_lse, a, case), strict=True):
        assert torch.isfinite(g).all()
        torch.testing.assert_close(g.double(), w.double(), atol=2e-4, rtol=4e-4)


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # interpreter: -inf
def test_additive_padding_mask_with_the_lowest_value() -> None:
    """HF's additive masks: finfo.min on padded keys. Rows whose every visible key is padded (causal
    plus left padding) take uniform weights, as the contract's fp32 sum gives: the forward trims
    the padded tiles, then runs them after all for those rows."""
    case = Case(batch=2, sq=40, sk=40, bias=(2, 1, 1, 40), causal=True)
    a = make_inputs(case)
    low = torch.finfo(torch.float32).min
    with torch.no_grad():
        a["bias"].zero_()
        a["bias"][0, ..., 30:] = low  # right padding: the last key tile is trimmed
        a["bias"][1, ..., :20] = low  # left padding: rows 0..19 see only padded keys
    out, lse = _call(torch.ops.coil.attention, a, case)
    assert torch.isfinite(lse).all()
    check_case_from(a, case, out, lse)


def _poison(t: torch.Tensor, index: Any) -> None:
    with torch.no_grad():
        t[index] = float("nan")


@pytest.mark.filterwarnings("ignore:All-NaN slice:RuntimeWarning")  # the NaN rows under test
@pytest.mark.parametrize("how", ["keep", "bias", "causal", "window"])
def test_invisible_key_tiles_are_never_computed(how: str) -> None:
    """NaN in keys/values of tiles no row may see: any tile that were computed would spread NaN
    (0 * NaN) into the output and the gradients of the rows that compute it."""
    if how == "keep":
        case = Case(sq=40, sk=48, keep=(1, 1, 1, 48))
    elif how == "bias":
        case = Case(sq=40, sk=48, bias=(1, 1, 1, 48))
    elif how == "causal":
        case = Case(sq=20, sk=48, causal=True)  # keys 32.. are after every query
    else:
        case = Case(sq=48, sk=48, window=8)
    a = make_inputs(case)
    rows = slice(None)
    if how in ("keep", "bias", "causal"):
        if how == "keep":
            a["keep"][..., 32:] = False
        if how == "bias":
            with torch.no_grad():
                a["bias"][..., 32:] = torch.finfo(torch.float32).min
        _poison(a["k"], (slice(None), slice(None), slice(32, None)))
        _poison(a["v"], (slice(None), slice(None), slice(32, None)))
    else:
        _poison(a["k"], (slice(None), slice(None), slice(0, 16)))
        _poison(a["v"], (slice(None), slice(None), slice(0, 16)))
        rows = slice(32, None)  # rows 32.. see keys > 24 only; block 16..31 loads tile 0..15
    out, lse = _call(torch.ops.coil.attention, a, case)
    assert torch.isfinite(out[:, :, rows]).all() and torch.isfinite(lse[:, :, rows]).all()
    (dq,) = torch.autograd.grad(out[:, :, rows].sum(), [a["q"]])
    assert torch.isfinite(dq[:, :, rows]).all()
    clean = make_inputs(case)
    clean["keep"], clean["bias"] = a["keep"], a["bias"]
    want, _ = _call(oracle, clean, case)
    if how != "window":
        torch.testing.assert_close(out.double(), want, atol=5e-5, rtol=1e-4)


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # interpreter: -inf
def test_skip_tiles_option_skips_dead_tiles_inside_the_range() -> None:
    """skip_tiles=True (the bench's alternative): a dead tile between live ones is skipped (NaN
    there stays out), and the results are the oracle's, fully padded rows included."""
    from coil.runtime import attention_launch

    case = Case(batch=2, sq=40, sk=64, bias=(2, 1, 1, 64), keep=(2, 1, 1, 64))
    a = make_inputs(case)
    with torch.no_grad():
        a["bias"].zero_()
        a["bias"][1, ..., 48:] = torch.finfo(torch.float32).min
    a["keep"].fill_(True)
    a["keep"][..., 16:32] = False  # an interior dead tile
    want, want_lse = _call(oracle, a, case)
    g_out = torch.randn(want.shape, generator=torch.Generator().manual_seed(3))
    want_grads = torch.autograd.grad(want, [a["q"], a["k"], a["v"], a["bias"]], g_out.double())
    poisoned = {**a, "k": a["k"].detach().clone(), "v": a["v"].detach().clone()}
    _poison(poisoned["k"], (slice(None), slice(None), slice(16, 32)))
    _poison(poisoned["v"], (slice(None), slice(None), slice(16, 32)))
    args = [poisoned[n] for n in ("q", "k", "v", "bias", "keep", "alibi", "scale", "causal",
                                  "window", "softcap")]
    args = [t.detach() if isinstance(t, torch.Tensor) else t for t in args]
    out, lse = attention_launch.forward(*args, skip_tiles=True)
    torch.testing.assert_close(out.double(), want, atol=5e-5, rtol=1e-4)
    torch.testing.assert_close(lse.double(), want_lse, atol=5e-5, rtol=1e-4)
    grads = attention_launch.backward(g_out, None, args[0], args[1], args[2], out, lse, *args[3:],
                                      bias_grad=True, skip_tiles=True)
    grads = (*grads[:3], grads[3].sum_to_size(a["bias"].shape))
    for g, w in zip(grads, want_grads, strict=True):
        torch.testing.assert_close(g.double(), w.double(), atol=2e-4, rtol=4e-4)


def test_empty_sizes() -> None:
    q = torch.randn(1, 2, 5, 16)
    out, lse = torch.ops.coil.attention(q, q[:, :, :0], q[:, :, :0], None, None, None, 1.0,
                                        False, 0, 0.0)
    assert (out == 0).all() and torch.isneginf(lse).all()
    out, lse = torch.ops.coil.attention(q[:, :, :0], q, q, None, None, None, 1.0, False, 0, 0.0)
    assert out.shape == (1, 2, 0, 16) and lse.shape == (1, 2, 0)


@pytest.mark.parametrize(("change", "message"), [
    ({"k": torch.randn(1, 3, 8, 16), "v": torch.randn(1, 3, 8, 16)}, "argument 'k' has 3 heads"),
    ({"v": torch.randn(1, 2, 9, 16)}, "argument 'v' must have k's shape"),
    ({"q": torch.randn(1, 2, 8, 300), "k": torch.randn(1, 2, 8, 300),
      "v": torch.randn(1, 2, 8, 300)}, "argument 'q' head size"),
    ({"k": torch.randn(1, 2, 8, 16).half()}, "argument 'k' must have q's dtype"),
    ({"bias": torch.randn(2, 2, 8, 8)}, "argument 'bias' of shape (2, 2, 8, 8) does not broadcast"),
    ({"keep": torch.ones(1, 1, 8, 8)}, "argument 'keep' must be a bool tensor"),
    ({"alibi": torch.ones(3)}, "argument 'alibi' must be float32 of shape (2,)"),
    ({"window": -1}, "argument 'window' must be >= 0"),
    ({"softcap": float("nan")}, "argument 'softcap'"),
])
def test_argument_errors_name_op_and_argument(change: dict[str, Any], message: str) -> None:
    args: dict[str, Any] = {"q": torch.randn(1, 2, 8, 16), "k": torch.randn(1, 2, 8, 16),
                            "v": torch.randn(1, 2, 8, 16), "bias": None, "keep": None,
                            "alibi": None, "scale": 0.25, "causal": False, "window": 0,
                            "softcap": 0.0}
    args.update(change)
    with pytest.raises(ValueError, match="coil::attention: ") as info:
        torch.ops.coil.attention(*args.values())
    assert message in str(info.value)
    mode = torch._subclasses.FakeTensorMode()
    fake = [mode.from_tensor(t) if isinstance(t, torch.Tensor) else t for t in args.values()]
    with pytest.raises(ValueError, match="coil::attention: "), mode:
        torch.ops.coil.attention(*fake)


def test_ops_tuple() -> None:
    assert (torch.ops.coil.attention.default, torch.ops.coil.attention_backward.default) == attn.OPS
    assert str(attn.OPS[0]._schema).startswith("coil::attention(Tensor q, Tensor k, Tensor v,")


def test_torch_compile_aot_eager_traces_forward_and_backward() -> None:
    case = Case(heads=4, kv_heads=2, sq=20, sk=24, bias=(1, 1, 20, 24), causal=True)
    a = make_inputs(case)

    def f(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        out, _ = torch.ops.coil.attention(q, k, v, bias, None, None, 0.25, True, 0, 0.0)
        return (out * out).sum()

    compiled = torch.compile(f, backend="aot_eager", fullgraph=True)
    inputs = [a["q"], a["k"], a["v"], a["bias"]]
    got = torch.autograd.grad(compiled(*inputs), inputs)
    want = torch.autograd.grad(f(*inputs), inputs)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)


def test_opcheck() -> None:
    case = Case(heads=2, kv_heads=1, sq=17, sk=20, bias=(1, 2, 17, 20))
    a = make_inputs(case)
    args = (a["q"], a["k"], a["v"], a["bias"], None, None, 0.25, False, 0, 0.0)
    results = torch.library.opcheck(torch.ops.coil.attention.default, args)
    assert set(results.values()) == {"SUCCESS"}, results


def test_config_rule() -> None:
    plain = AttentionVariant()
    assert forward_config(64, 4096, 4096, torch.bfloat16, plain) == TileConfig(128, 64, 4, 3)
    assert forward_config(128, 2048, 2048, torch.bfloat16, plain) == TileConfig(128, 64, 8, 3)
    assert forward_config(64, 1, 4096, torch.float16, plain).block_m == 16  # decoding
    assert forward_config(64, 4096, 4096, torch.float32, plain) == TileConfig(64, 32, 4, 2)
    assert forward_config(64, 512, 512, torch.bfloat16, plain, interpreted=True).block_m == 16
    with_dbias = backward_config(64, 512, 512, torch.bfloat16, AttentionVariant(bias_grad=True))
    assert with_dbias.dkdv.block_n == 64 and with_dbias.dq.block_m == 128
    masked = AttentionVariant(has_keep=True)
    assert forward_config(64, 512, 512, torch.bfloat16, masked) == TileConfig(128, 64, 8, 3)  # keep masks: not swept
    bias = AttentionVariant(has_bias=True)
    assert forward_config(64, 512, 512, torch.bfloat16, bias) == TileConfig(128, 64, 4, 2)  # the sweep's winner
    causal = AttentionVariant(causal=True)
    assert forward_config(64, 4096, 4096, torch.bfloat16, causal) == TileConfig(64, 64, 4, 3)  # the sweep's winner
    windowed = AttentionVariant(causal=True, window=True)  # not swept: the plain rule
    assert forward_config(64, 4096, 4096, torch.bfloat16, windowed) == TileConfig(128, 64, 4, 3)
    assert backward_config(64, 4096, 4096, torch.bfloat16, causal) == backward_config(64, 4096, 4096, torch.bfloat16,
                                                                                       plain)
    with pytest.raises(ValueError, match="power of two"):
        TileConfig(96, 64, 4, 3)


# ---- GPU (bf16 at realistic sizes, CUDA graphs) -------------------------------------------------

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="needs a CUDA device (none found)")

GPU_CASES = {
    "padding_keep": Case(batch=4, heads=12, kv_heads=12, sq=512, sk=512, d=64, keep=(4, 1, 1, 512)),
    "causal": Case(batch=2, heads=12, kv_heads=12, sq=1024, sk=1024, d=64, causal=True),
    "window": Case(batch=1, heads=4, kv_heads=4, sq=2048, sk=2048, d=64, window=300),
    "alibi_bias": Case(batch=2, heads=8, kv_heads=8, sq=333, sk=333, d=64, alibi=True,
                       bias=(2, 1, 1, 333)),
    "gqa_d128": Case(batch=2, heads=8, kv_heads=2, sq=700, sk=700, d=128, causal=True),
    "d80_softcap": Case(batch=2, heads=4, kv_heads=4, sq=300, sk=500, d=80, softcap=30.0),
}


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("name", list(GPU_CASES))
def test_gpu_bf16_matches_fp64(name: str) -> None:
    check_case(GPU_CASES[name], torch.bfloat16, torch.device("cuda"), atol=1e-2, rtol=2e-2,
               normalized=True)


@pytest.mark.gpu
@needs_cuda
def test_gpu_fp32_and_cuda_graph_capture() -> None:
    check_case(Case(batch=2, heads=4, kv_heads=2, sq=257, sk=300, d=64, bias=(1, 4, 257, 300)),
               torch.float32, torch.device("cuda"), atol=1e-4, rtol=1e-4)
    q, k, v = (torch.randn(2, 4, 256, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    args = (None, None, None, 0.125, True, 0, 0.0)
    torch.ops.coil.attention(q, k, v, *args)  # compiles outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured, _ = torch.ops.coil.attention(q, k, v, *args)
    q.copy_(torch.randn_like(q))
    graph.replay()
    want, _ = torch.ops.coil.attention(q, k, v, *args)
    assert math.isclose(float((captured.float() - want.float()).abs().max()), 0.0, abs_tol=0.0)
