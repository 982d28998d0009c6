"""The attention pattern fires on HF-style eager attention (GPT-2 and BERT forms)."""

from __future__ import annotations

import math

import torch
from coil.fx_passes import ATTENTION_RULES, run_post_grad_passes
from torch import nn


class GPT2StyleAttention(nn.Module):
    """The shape of HF GPT-2 eager attention: fused qkv projection, split heads, matmul with
    k^T, divide by torch.full([], sqrt(d)), additive causal mask slice, softmax, dropout."""

    def __init__(self, d: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads, self.d = heads, d
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)
        self.attn_dropout = nn.Dropout(0.1)

    def _split_heads(self, t: torch.Tensor) -> torch.Tensor:
        b, s, _ = t.shape
        return t.view(b, s, self.heads, self.d // self.heads).permute(0, 2, 1, 3)

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        q, k, v = self.c_attn(x).split(self.d, dim=2)
        q, k, v = self._split_heads(q), self._split_heads(k), self._split_heads(v)
        w = torch.matmul(q, k.transpose(-1, -2))
        w = w / torch.full([], (self.d // self.heads) ** 0.5, dtype=x.dtype, device=x.device)
        w = w + attention_mask[:, :, :, : k.shape[-2]]
        w = nn.functional.softmax(w, dim=-1)
        w = self.attn_dropout(w)
        out = torch.matmul(w, v).permute(0, 2, 1, 3).contiguous()
        return self.c_proj(out.view(x.shape))


class BertStyleSelfAttention(nn.Module):
    """The shape of HF BERT eager self-attention: separate q/k/v projections,
    transpose_for_scores, scores / math.sqrt(d) + extended mask, softmax, dropout."""

    def __init__(self, d: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, d // heads
        self.query, self.key, self.value = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.dropout = nn.Dropout(0.1)

    def _t(self, t: torch.Tensor) -> torch.Tensor:
        b, s, _ = t.shape
        return t.view(b, s, self.heads, self.head_dim).permute(0, 2, 1, 3)

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        q, k, v = self._t(self.query(x)), self._t(self.key(x)), self._t(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2))
        scores = scores / math.sqrt(self.head_dim)
        scores = scores + attention_mask
        probs = self.dropout(nn.functional.softmax(scores, dim=-1))
        ctx = torch.matmul(probs, v).permute(0, 2, 1, 3).contiguous()
        return ctx.view(x.shape[0], x.shape[1], -1)


def _sdpa_nodes(gm: torch.fx.GraphModule) -> list[str]:
    return [str(n.target) for n in gm.graph.nodes if "scaled_dot_product" in str(n.target)]


def _pipeline(g: torch.fx.GraphModule, bw: bool) -> torch.fx.GraphModule:
    return run_post_grad_passes(g, is_backward=bw)


def test_rules_are_listed_data() -> None:
    assert len(ATTENTION_RULES) == 12
    base = {"sdpa_div_mask", "sdpa_mul_mask", "sdpa_mask", "sdpa_div", "sdpa_mul", "sdpa"}
    assert set(ATTENTION_RULES.names()) == base | {f"{n}_decomposed" for n in base}


def test_gpt2_style_attention_fuses(aot, op_names) -> None:
    torch.manual_seed(0)
    model = GPT2StyleAttention().eval()
    x = torch.randn(2, 8, 32)
    causal = torch.full((8, 8), float("-inf")).triu(1)
    mask = causal.expand(2, 1, 8, 8).contiguous()
    with torch.no_grad():
        cap = aot(model, [x, mask], _pipeline)
        out = cap.fn(x, mask)
        ref = model(x, mask)
    before, after = op_names(cap.before[0]), op_names(cap.after[0])
    assert "aten._softmax.default" in before and "aten.full.default" in before
    assert _sdpa_nodes(cap.after[0]), after
    assert "aten._softmax.default" not in after and "aten.bmm.default" not in after
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)


def test_bert_style_attention_fuses(aot, op_names) -> None:
    torch.manual_seed(0)
    model = BertStyleSelfAttention().eval()
    x = torch.randn(2, 8, 32)
    mask = torch.zeros(2, 1, 1, 8)
    mask[1, :, :, 5:] = -10000.0  # padding in the second sequence
    with torch.no_grad():
        cap = aot(model, [x, mask], _pipeline)
        out = cap.fn(x, mask)
        ref = model(x, mask)
    assert _sdpa_nodes(cap.after[0])
    assert "aten._softmax.default" not in op_names(cap.after[0])
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)


def test_training_graph_is_not_fused_and_grads_match(aot, op_names) -> None:
    """In training the attention weights are saved for backward: intermediates escape the
    pattern, so it must not fire (and gradients stay exact)."""
    torch.manual_seed(0)
    model = BertStyleSelfAttention()
    model.dropout.p = 0.0
    x = torch.randn(2, 8, 32, requires_grad=True)
    mask = torch.zeros(2, 1, 1, 8)
    cap = aot(model, [x, mask], _pipeline)
    out = cap.fn(x, mask)
    out.sum().backward()
    gx = x.grad.clone()
    x.grad = None
    model(x, mask).sum().backward()
    assert not _sdpa_nodes(cap.after[0])
    torch.testing.assert_close(gx, x.grad, atol=1e-5, rtol=1e-5)


def test_mask_of_wrong_dtype_is_rejected(trace) -> None:
    from coil.fx_passes import PassManager, Stage, fuse_attention

    def f(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        return torch.matmul(torch.softmax(torch.matmul(q, k.transpose(-2, -1)) / 4.0 + m, -1), v)

    q = torch.randn(1, 2, 4, 8)
    gm = trace(f, q, q, q, torch.zeros(1, 1, 4, 4, dtype=torch.float16))  # SDPA needs q's dtype
    assert not PassManager([fuse_attention], stage=Stage.POST_GRAD).run(gm).modified
    gm = trace(f, q, q, q, torch.zeros(1, 1, 4, 4))
    assert PassManager([fuse_attention], stage=Stage.POST_GRAD).run(gm).modified
    m = torch.randn(1, 1, 4, 4)
    torch.testing.assert_close(gm(q, q, q, m), f(q, q, q, m), atol=1e-5, rtol=1e-5)


def test_a_replacement_on_sdpa_math_path_is_refused(trace) -> None:
    """Where SDPA would run its math path (the same chain plus a `_safe_softmax`), the chain
    stays: the rule, with its replacement forced onto that path, does not fire."""
    import dataclasses

    from coil.fx_passes import PassManager, Stage, pattern_pass
    from coil.fx_passes.patterns.registry import PatternRegistry

    def f(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        return torch.matmul(torch.softmax(torch.matmul(q, k.transpose(-2, -1)) / 4.0 + m, -1), v)

    def on_math(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, m: torch.Tensor, s: float) -> torch.Tensor:
        return torch.ops.aten._scaled_dot_product_attention_math(q, k, v, m, scale=1.0 / s)[0]

    rule = next(r for r in ATTENTION_RULES if r.name == "sdpa_div_mask")
    q, m = torch.randn(1, 2, 4, 8), torch.zeros(1, 1, 4, 4)
    for replacement, fires in ((rule.replacement, True), (on_math, False)):
        variant = dataclasses.replace(rule, replacement=replacement, _cache={})
        gm = trace(f, q, q, q, m)
        one = pattern_pass("one_rule", PatternRegistry([variant]), doc="one rule")
        assert PassManager([one], stage=Stage.POST_GRAD).run(gm).modified is fires


def test_identity_clone_inside_attention_is_absorbed(trace) -> None:
    """torch 2.11 traces eval-mode dropout as a plain clone between softmax and the matmul."""
    from coil.fx_passes import PassManager, Stage, fuse_attention

    def f(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        w = torch.softmax(torch.matmul(q, k.transpose(-1, -2)) * 0.25, -1).clone()
        return torch.matmul(w, v)

    q = torch.randn(1, 2, 4, 8)
    gm = trace(f, q, q, q)
    assert any(n.target is torch.ops.aten.clone.default and not n.kwargs for n in gm.graph.nodes)
    assert PassManager([fuse_attention], stage=Stage.POST_GRAD).run(gm).modified
    assert _sdpa_nodes(gm)
    torch.testing.assert_close(gm(q, q, q), f(q, q, q), atol=1e-5, rtol=1e-5)


def test_required_ops_occur_in_each_traced_pattern() -> None:
    for rule in ATTENTION_RULES:
        targets = {n.target for n in rule.traced_pattern().graph.nodes}
        assert rule.required_ops and rule.required_ops <= targets, rule.name


def test_decomposed_form_fuses_and_traces_are_cached_per_signature(trace) -> None:
    """A decomposition table (as in coil's backend) leaves kᵀ as permute and softmax as
    amax/sub/exp/sum/div; the ``*_decomposed`` rules match that, and layers with equal shapes
    reuse one traced pattern and replacement."""
    from coil.fx_passes import PassManager, Stage, fuse_attention
    from torch._decomp import get_decompositions
    from torch.fx.experimental.proxy_tensor import make_fx

    aten = torch.ops.aten

    def f(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        for _ in range(2):  # two "layers" of HF eager attention
            w = torch.softmax(torch.matmul(q, k.transpose(2, 3)) * 0.25 + m, dim=-1)
            q = torch.matmul(w, v)
        return q

    decomp = get_decompositions([aten._softmax.default, aten.transpose.int])
    q, k, v = (torch.randn(2, 2, 4, 8) for _ in range(3))
    m = torch.zeros(2, 1, 4, 4)
    gm = make_fx(f, decomposition_table=decomp, tracing_mode="fake")(q, k, v, m)
    assert not any(n.target is aten._softmax.default for n in gm.graph.nodes)
    rule = ATTENTION_RULES["sdpa_mul_mask_decomposed"]
    rule._cache.clear()
    assert PassManager([fuse_attention], stage=Stage.POST_GRAD, verify=True).run(gm).modified
    assert len(_sdpa_nodes(gm)) == 2
    assert not any(n.target is aten.bmm.default for n in gm.graph.nodes)
    assert sorted(k[0] for k in rule._cache if isinstance(k, tuple)) == ["pattern", "replacement"]
    torch.testing.assert_close(gm(q, k, v, m), f(q, k, v, m), atol=1e-5, rtol=1e-5)
