"""attention_to_op: attention as models write it becomes one call of the attention op.

The op here is a stand-in with the contract's schema in a test-only namespace, implemented as
float64 reference math (docs/contracts.md's definition, written out independently of the pass);
its backward is that math's autograd. Each test captures a function with Dynamo, rewrites the
graph, counts the op's calls and checks the outputs (and gradients) against eager PyTorch.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from coil.fx_passes import attention_to_op, run_pre_grad_passes
from coil.fx_passes.fake_meta import describe_mismatch
from dynamo_capture import capture
from torch import Tensor, nn
from torch.fx import GraphModule, Node

Fn = Callable[..., Any]


def _reference(q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None, keep: Tensor | None, alibi: Tensor | None,
               scale: float, causal: bool, window: int, softcap: float) -> tuple[Tensor, Tensor]:
    """The contract's attention in float64 (differentiable in q, k, v, bias)."""
    group = q.shape[1] // k.shape[1]
    kk, vv = k.double().repeat_interleave(group, 1), v.double().repeat_interleave(group, 1)
    s = scale * q.double() @ kk.transpose(-1, -2)
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    i, j = torch.arange(q.shape[2])[:, None], torch.arange(k.shape[2])[None, :]
    if alibi is not None:
        s = s + (alibi.float()[:, None, None] * (j - i).float()).to(q.dtype).double()
    if bias is not None:
        s = s + bias.double()
    masked = (j > i) & causal | (j <= i - window) & (window > 0)
    if keep is not None:
        masked = masked | ~keep
    s = s.masked_fill(masked, float("-inf"))
    lse = torch.logsumexp(s, -1)
    p = torch.exp(s - lse[..., None]).nan_to_num(0.0)  # a row with every key masked is 0
    return (p @ vv).to(q.dtype), lse.float()


@torch.library.custom_op("coil_fx_test::attention", mutates_args=())
def reference_attention(q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None, keep: Tensor | None,
                        alibi: Tensor | None, scale: float, causal: bool, window: int,
                        softcap: float) -> tuple[Tensor, Tensor]:
    out, lse = _reference(q, k, v, bias, keep, alibi, scale, causal, window, softcap)
    return out.contiguous(), lse


@reference_attention.register_fake
def _(q: Tensor, k: Tensor, v: Tensor, *_: Any) -> tuple[Tensor, Tensor]:
    return q.new_empty(q.shape), q.new_empty(q.shape[:3], dtype=torch.float32)


def _setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    ctx.inputs = inputs


def _backward(ctx: Any, grad_out: Tensor, grad_lse: Tensor) -> tuple[Any, ...]:
    q, k, v, bias, *rest = ctx.inputs
    leaves = [t.detach().requires_grad_() if t is not None else None for t in (q, k, v, bias)]
    with torch.enable_grad():
        out, _ = _reference(*leaves, *rest)  # type: ignore[arg-type]
        wanted = [t for t in leaves if t is not None]
        grads = iter(torch.autograd.grad(out, wanted, grad_out))
    return (*[next(grads) if t is not None else None for t in leaves], None, None, None, None, None, None)


reference_attention.register_autograd(_backward, setup_context=_setup)
OP = torch.ops.coil_fx_test.attention.default


def test_the_stand_in_has_the_contracts_schema() -> None:
    assert str(OP._schema) == (
        "coil_fx_test::attention(Tensor q, Tensor k, Tensor v, Tensor? bias, Tensor? keep, Tensor? alibi, "
        "float scale, bool causal, SymInt window, float softcap) -> (Tensor, Tensor)")


def _calls(gm: GraphModule) -> list[Node]:
    return [n for n in gm.graph.nodes if n.target is OP]


def _meta_is_current(gm: GraphModule) -> None:
    """Every node's recorded value agrees with a fresh fake propagation (shape, strides, dtype)."""
    from coil.fx_passes.passes.attention_op import _compute

    fake = next(n.meta["example_value"].fake_mode for n in gm.graph.nodes if n.op == "placeholder")
    for n in gm.graph.nodes:
        if n.op in ("call_function", "call_method") and "example_value" in n.meta:
            assert describe_mismatch(n.meta["example_value"], _compute(n, fake)) is None, n.format_node()


def _rewrite(fn: Fn, *args: Any, mode: str = "always", atol: float = 1e-5) -> list[Node]:
    """Capture ``fn``, rewrite, check outputs against eager; the op calls left in the graph."""
    want = fn(*args)
    gm, inputs = capture(fn, *args)
    attention_to_op(OP, mode)(gm)
    _meta_is_current(gm)
    got = gm(*inputs)
    want = want if isinstance(want, tuple) else (want,)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, atol=atol, rtol=1e-4)
    return _calls(gm)


def _qkv(heads: int = 4, kv_heads: int = 4, lq: int = 6, lk: int = 6, dtype: torch.dtype = torch.float32,
         ) -> tuple[Tensor, Tensor, Tensor]:
    g = torch.Generator().manual_seed(0)
    return (torch.randn(2, heads, lq, 8, generator=g).to(dtype),
            torch.randn(2, kv_heads, lk, 8, generator=g).to(dtype),
            torch.randn(2, kv_heads, lk, 8, generator=g).to(dtype))


def _op_args(call: Node) -> dict[str, Any]:
    names = ("q", "k", "v", "bias", "keep", "alibi", "scale", "causal", "window", "softcap")
    return dict(zip(names, call.args, strict=True))


def _placeholder(node: object) -> str:
    assert isinstance(node, Node) and node.op == "placeholder", node
    return str(node.target)


# --- scaled_dot_product_attention ---------------------------------------------------------------

def test_sdpa_masks_become_keep_and_bias() -> None:
    q, k, v = _qkv()
    keep = torch.rand(2, 1, 6, 6, generator=torch.Generator().manual_seed(1)) > 0.3
    additive = torch.zeros(2, 1, 6, 6).masked_fill(~keep, torch.finfo(torch.float32).min)

    def fn(q: Tensor, k: Tensor, v: Tensor, keep: Tensor, additive: Tensor) -> tuple[Tensor, Tensor]:
        return (F.scaled_dot_product_attention(q, k, v, attn_mask=keep),
                F.scaled_dot_product_attention(q, k, v, additive, scale=0.2))

    for mode in ("always", "auto"):
        first, second = _rewrite(fn, q, k, v, keep, additive, mode=mode)
        assert _op_args(first)["keep"] is not None and _op_args(first)["bias"] is None
        assert _op_args(first)["scale"] == pytest.approx(8 ** -0.5)
        assert _op_args(second)["bias"] is not None and _op_args(second)["scale"] == 0.2


def test_plain_and_causal_sdpa_are_left_to_flash_in_auto_mode() -> None:
    q, k, v = _qkv(lq=4)

    def fn(q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        return F.scaled_dot_product_attention(q, k, v), F.scaled_dot_product_attention(q, k, v, is_causal=True)

    assert len(_rewrite(fn, q, k, v, mode="auto")) == 0
    plain, causal = _rewrite(fn, q, k, v, mode="always")
    assert (_op_args(plain)["causal"], _op_args(causal)["causal"]) == (False, True)


def _band_sdpa(q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Masks from sizes alone: causal, nothing masked, a causal band of 3."""
    i, j = torch.arange(q.shape[-2])[:, None], torch.arange(k.shape[-2])[None, :]
    return (F.scaled_dot_product_attention(q, k, v, attn_mask=j <= i),
            F.scaled_dot_product_attention(q, k, v, attn_mask=(j >= 0) & (i >= 0)),
            F.scaled_dot_product_attention(q, k, v, attn_mask=(j <= i) & (j > i - 3)))


def test_static_masks_become_flags() -> None:
    causal, nothing, band = _rewrite(_band_sdpa, *_qkv())
    assert [(_op_args(c)["keep"], _op_args(c)["causal"], _op_args(c)["window"]) for c in (causal, nothing, band)] == [
        (None, True, 0), (None, False, 0), (None, True, 3)]
    (band,) = _rewrite(_band_sdpa, *_qkv(), mode="auto")  # causal and unmasked: flash's
    assert _op_args(band)["window"] == 3


def test_a_static_additive_band_with_lowest_fill() -> None:
    def fn(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        i, j = torch.arange(q.shape[-2])[:, None], torch.arange(k.shape[-2])[None, :]
        mask = torch.zeros(q.shape[-2], k.shape[-2]).masked_fill((j > i) | (j <= i - 2), torch.finfo(torch.float32).min)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    (call,) = _rewrite(fn, *_qkv())
    assert (_op_args(call)["bias"], _op_args(call)["causal"], _op_args(call)["window"]) == (None, True, 2)


def test_sdpa_with_dropout_stays() -> None:
    gm, _ = capture(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, dropout_p=0.1), *_qkv())
    assert not attention_to_op(OP)(gm).modified


def repeat_kv(x: Tensor, n: int) -> Tensor:
    """HF transformers' repeat_kv."""
    b, heads, s, d = x.shape
    return x[:, :, None, :, :].expand(b, heads, n, s, d).reshape(b, heads * n, s, d)


def test_gqa_passes_the_unwidened_keys_and_values() -> None:
    q, k, v = _qkv(heads=4, kv_heads=2)
    mask = torch.rand(2, 1, 6, 6, generator=torch.Generator().manual_seed(2)) > 0.2

    def fn(q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        return (F.scaled_dot_product_attention(q, repeat_kv(k, 2), repeat_kv(v, 2), attn_mask=mask),
                F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True),
                F.scaled_dot_product_attention(q, k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1), mask))

    calls = _rewrite(fn, q, k, v, mask)
    assert [(_placeholder(_op_args(c)["k"]), _placeholder(_op_args(c)["v"])) for c in calls] == [("L_k_", "L_v_")] * 3


# --- eager softmax chains ---------------------------------------------------------------------

class LlamaEagerAttention(nn.Module):
    """HF's eager_attention_forward: repeat_kv, * scaling, + sliced additive mask, fp32 softmax
    cast back, dropout (eval), product with v."""

    def __init__(self, softcap: float | None = None) -> None:
        super().__init__()
        self.softcap = softcap

    def forward(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
        k, v = repeat_kv(k, q.shape[1] // k.shape[1]), repeat_kv(v, q.shape[1] // v.shape[1])
        w = torch.matmul(q, k.transpose(2, 3)) * q.shape[-1] ** -0.5
        if self.softcap is not None:  # gemma2
            w = w / self.softcap
            w = torch.tanh(w)
            w = w * self.softcap
        w = w + mask[:, :, :, : k.shape[-2]]
        w = nn.functional.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype)
        w = nn.functional.dropout(w, p=0.1, training=self.training)
        return torch.matmul(w, v).transpose(1, 2).contiguous()


def _padding_mask(lq: int, lk: int) -> Tensor:
    """An HF 4-D additive mask: causal and the first key of batch 1 padded (dtype's lowest)."""
    keep = torch.ones(lq, lk, dtype=torch.bool).tril()[None, None].repeat(2, 1, 1, 1)
    keep[1, :, :, 0] = False
    keep[1, :, 0, 0] = True  # every row keeps a key
    return torch.zeros(2, 1, lq, lk).masked_fill(~keep, torch.finfo(torch.float32).min)


@pytest.mark.parametrize("softcap", [None, 30.0])
def test_llama_and_gemma2_eager_attention(softcap: float | None) -> None:
    module = LlamaEagerAttention(softcap).eval()
    q, k, v = _qkv(heads=4, kv_heads=2)
    for mode in ("always", "auto"):
        (call,) = _rewrite(module, q, k, v, _padding_mask(6, 6), mode=mode)
        args = _op_args(call)
        assert (_placeholder(args["k"]), _placeholder(args["v"])) == ("L_k_", "L_v_")
        assert args["scale"] == pytest.approx(8 ** -0.5) and args["softcap"] == (softcap or 0.0)
        assert args["bias"] is not None and args["keep"] is None


def test_bf16_eager_chain_within_bf16_tolerance() -> None:
    q, k, v = _qkv(heads=4, kv_heads=2, dtype=torch.bfloat16)
    (call,) = _rewrite(LlamaEagerAttention().eval(), q, k, v, _padding_mask(6, 6).bfloat16(), atol=2e-2)
    assert _op_args(call)["q"] is not None


def test_training_dropout_and_returned_weights_stay() -> None:
    q, k, v = _qkv()
    gm, _ = capture(LlamaEagerAttention().train(), q, k, v, _padding_mask(6, 6))
    assert not attention_to_op(OP)(gm).modified

    def weights_returned(q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        w = torch.softmax(q @ k.transpose(-1, -2) / 8.0, dim=-1)
        return w @ v, w

    def scores_read_twice(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        s = q @ k.transpose(-1, -2)
        return torch.softmax(s, -1) @ v + s.sum()

    for fn in (weights_returned, scores_read_twice):
        gm, _ = capture(fn, q, k, v)
        assert not attention_to_op(OP)(gm).modified, fn.__name__


def test_forms_that_do_not_match_stay() -> None:
    q, k, v = _qkv()

    def softmax_over_queries(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        return torch.softmax(q @ k.transpose(-1, -2), dim=-2) @ v

    def scale_from_an_input(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        return torch.softmax((q @ k.transpose(-1, -2)) * v.mean(), dim=-1) @ v

    def finite_fill(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        s = (q @ k.transpose(-1, -2)).masked_fill(v[..., :1] > 0, torch.finfo(torch.float32).min)
        return torch.softmax(s, dim=-1) @ v

    for fn in (softmax_over_queries, scale_from_an_input, finite_fill):
        gm, _ = capture(fn, q, k, v)
        assert not attention_to_op(OP)(gm).modified, fn.__name__


class T5Attention(nn.Module):
    """T5's form: no scaling, a learned relative-position bias added in place, fp32 softmax
    cast back with type_as, dropout (eval)."""

    def __init__(self, heads: int = 4, buckets: int = 8) -> None:
        super().__init__()
        self.relative = nn.Embedding(buckets, heads)
        self.buckets = buckets

    def forward(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
        i, j = torch.arange(q.shape[2])[:, None], torch.arange(k.shape[2])[None, :]
        bucket = (j - i).clamp(-(self.buckets // 2), self.buckets // 2 - 1) + self.buckets // 2
        bias = self.relative(bucket).permute(2, 0, 1)[None] + mask
        scores = torch.matmul(q, k.transpose(3, 2))
        scores += bias
        w = nn.functional.softmax(scores.float(), dim=-1).type_as(scores)
        w = nn.functional.dropout(w, p=0.1, training=self.training)
        return torch.matmul(w, v)


def test_t5_relative_bias_forward_and_backward() -> None:
    torch.manual_seed(0)
    module = T5Attention().eval()
    q, k, v = (t.requires_grad_() for t in _qkv())
    mask = torch.zeros(2, 1, 1, 6)
    mask[1, ..., -2:] = torch.finfo(torch.float32).min  # padded keys
    (call,) = _rewrite(module, q, k, v, mask)
    assert _op_args(call)["scale"] == 1.0 and _op_args(call)["bias"] is not None

    want = module(q, k, v, mask)
    want_grads = torch.autograd.grad(want.square().sum(), [q, k, v, module.relative.weight])
    gm, inputs = capture(module, q, k, v, mask)
    assert attention_to_op(OP)(gm).modified
    (got,) = gm(*inputs)
    weight = next(t for t in inputs if t is module.relative.weight)
    got_grads = torch.autograd.grad(got.square().sum(), [q, k, v, weight])
    for g, w in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-4)


class NanoGPTAttention(nn.Module):
    """nanoGPT's form: a causal buffer read through masked_fill(-inf), `@` products."""

    def __init__(self, length: int = 6) -> None:
        super().__init__()
        self.register_buffer("bias", torch.tril(torch.ones(length, length)).view(1, 1, length, length))

    def forward(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        t = q.shape[2]
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :t, :t] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        return att @ v


def test_nanogpt_masked_fill_becomes_keep() -> None:
    (call,) = _rewrite(NanoGPTAttention(), *_qkv())
    assert _op_args(call)["keep"] is not None  # a buffer is state: not evaluated at compile time


def test_gpt2_tensor_scale_and_static_causal_mask() -> None:
    def fn(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        w = torch.matmul(q, k.transpose(-1, -2))
        w = w / torch.full([], v.size(-1) ** 0.5, dtype=w.dtype, device=w.device)
        i, j = torch.arange(q.shape[2])[:, None], torch.arange(k.shape[2])[None, :]
        w = w + torch.zeros(q.shape[2], k.shape[2]).masked_fill(j > i, float("-inf"))
        return torch.matmul(nn.functional.softmax(w, dim=-1), v)

    (call,) = _rewrite(fn, *_qkv())
    args = _op_args(call)
    assert (args["scale"], args["bias"], args["causal"]) == (pytest.approx(8 ** -0.5), None, True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_alibi_becomes_slopes(dtype: torch.dtype) -> None:
    """The product in float32, cast to q's dtype (bf16: the op rounds alibi * (j - i) alike)."""
    slopes = torch.tensor([0.5, 0.25, 0.125, 0.0625])

    def fn(q: Tensor, k: Tensor, v: Tensor, slopes: Tensor) -> Tensor:
        i, j = torch.arange(q.shape[2])[:, None], torch.arange(k.shape[2])[None, :]
        bias = (slopes[:, None, None] * (j - i)).to(q.dtype).masked_fill(j > i, float("-inf"))
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)

    (call,) = _rewrite(fn, *_qkv(lq=24, lk=24, dtype=dtype), slopes, atol=1e-5 if dtype == torch.float32 else 2e-2)
    args = _op_args(call)
    assert _placeholder(args["alibi"]) == "L_slopes_"
    assert (args["bias"], args["causal"], args["window"]) == (None, True, 0)


def test_an_alibi_like_bias_of_another_form_stays_a_bias() -> None:
    slopes = torch.tensor([0.5, 0.25, 0.125, 0.0625])

    def per_key(q: Tensor, k: Tensor, v: Tensor, slopes: Tensor) -> Tensor:
        i, j = torch.arange(q.shape[2])[:, None], torch.arange(k.shape[2])[None, :]
        bias = (slopes[:, None, None] * j).masked_fill(j > i, float("-inf"))
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)

    (call,) = _rewrite(per_key, *_qkv(), slopes)
    assert _op_args(call)["alibi"] is None and _op_args(call)["bias"] is not None


def test_sliding_window_eager_chain() -> None:
    def fn(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        i, j = torch.arange(q.shape[2])[:, None], torch.arange(k.shape[2])[None, :]
        w = (q @ k.transpose(-1, -2)) / 8.0 ** 0.5
        w = w.masked_fill((j > i) | (j <= i - 3), float("-inf"))
        return torch.softmax(w.float(), dim=-1).to(q.dtype) @ v

    (call,) = _rewrite(fn, *_qkv())
    assert (_op_args(call)["keep"], _op_args(call)["causal"], _op_args(call)["window"]) == (None, True, 3)


def test_an_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="mode"):
        attention_to_op(OP, "sometimes")


def test_the_pre_grad_pipeline_runs_it_first() -> None:
    q, k, v = _qkv()
    gm, inputs = capture(_band_sdpa, q, k, v)
    want = _band_sdpa(q, k, v)
    out = run_pre_grad_passes(gm, inputs, attention=attention_to_op(OP, "auto"))
    assert len(_calls(out)) == 1  # the band; causal_masks then makes the tril is_causal
    assert [n.kwargs.get("is_causal") for n in out.graph.nodes if "scaled_dot" in str(n.target)] == [True, None]
    for g, w in zip(out(*inputs), want, strict=True):
        torch.testing.assert_close(g, w)
