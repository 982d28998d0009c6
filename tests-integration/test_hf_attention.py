"""fx-passes' attention rules fire on the graphs transformers really produces (eager attention).

HF GPT-2 and BERT (transformers 5.x ``eager_attention_forward``: matmul(q, kᵀ) * scaling
[+ additive mask], softmax, cast, eval dropout, matmul with v) are compiled two ways:
- a capture backend: AOTAutograd with coil's decomposition table, then
  ``run_post_grad_passes`` (the graphs the backend sees: ``permute`` for kᵀ, softmax as
  amax/sub/exp/sum/div), graphs recorded before and after;
- ``torch.compile(model, backend="coil")``, the real backend (Triton interpreter on CPU).
Each time: one fused attention node per layer, no bmm left, and the result equals eager.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch
from coil.backend import COMPILED
from coil.fx_passes import ATTENTION_RULES, PassManager, Stage, run_post_grad_passes
from coil.knobs import knobs as backend_knobs
from coil.lowering_ir import decomposition_table
from torch._functorch.aot_autograd import aot_module_simplified, make_boxed_func
from torch.fx import GraphModule

transformers = pytest.importorskip("transformers")

LAYERS = 2
ATOL = 1e-4


def _gpt2() -> torch.nn.Module:
    cfg = transformers.GPT2Config(
        n_layer=LAYERS, n_embd=64, n_head=4, vocab_size=512, n_positions=64,
        bos_token_id=0, eos_token_id=0, attn_implementation="eager",
    )  # fmt: skip
    return transformers.GPT2LMHeadModel(cfg).eval()


def _bert() -> torch.nn.Module:
    cfg = transformers.BertConfig(
        hidden_size=64, num_hidden_layers=LAYERS, num_attention_heads=4, intermediate_size=128,
        vocab_size=512, attn_implementation="eager",
    )  # fmt: skip
    return transformers.BertModel(cfg).eval()


def _inputs(name: str, device: torch.device) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 512, (2, 16), generator=g).to(device)
    if name == "bert_padded":  # second sequence padded: an additive mask reaches attention
        mask = torch.ones(2, 16, dtype=torch.long)
        mask[1, 11:] = 0
        return {"input_ids": ids, "attention_mask": mask.to(device)}
    return {"input_ids": ids}


MODELS: dict[str, Callable[[], torch.nn.Module]] = {
    "gpt2": _gpt2,
    "bert": _bert,
    "bert_padded": _bert,
}
# which rule must fire on each (the masked form where an additive mask reaches attention)
EXPECTED_RULE: dict[str, set[str]] = {
    "gpt2": {"sdpa_mul_mask_decomposed"},  # causal mask added to scores * scaling
    # without padding, transformers 5.23 passes no mask, 5.17 an all-zero additive one
    "bert": {"sdpa_mul_decomposed", "sdpa_mul_mask_decomposed"},
    "bert_padded": {"sdpa_mul_mask_decomposed"},
}


def _first(out: Any) -> torch.Tensor:
    t = out.logits if hasattr(out, "logits") else out.last_hidden_state
    assert isinstance(t, torch.Tensor)
    return t


def _count(gm: GraphModule, word: str) -> int:
    return sum(1 for n in gm.graph.nodes if n.op == "call_function" and word in str(n.target))


Counter = dict[str, int]


@dataclass
class Capture:
    before: list[Counter] = field(default_factory=list)
    after: list[GraphModule] = field(default_factory=list)


def _ops(gm: GraphModule) -> Counter:
    out: Counter = {}
    for n in gm.graph.nodes:
        if n.op == "call_function":
            out[str(n.target)] = out.get(str(n.target), 0) + 1
    return out


def _capture_backend(cap: Capture) -> Callable[..., Any]:
    def compile_graph(gm: GraphModule, _example: Any) -> Any:
        cap.before.append(_ops(gm))
        gm = run_post_grad_passes(gm, is_backward=False)
        cap.after.append(gm)
        return make_boxed_func(gm.forward)

    def backend(gm: GraphModule, example_inputs: list[Any]) -> Any:
        return aot_module_simplified(
            gm, example_inputs, fw_compiler=compile_graph, inference_compiler=compile_graph,
            decompositions=decomposition_table(),
        )  # fmt: skip

    return backend


@pytest.fixture
def fired(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Names of the attention rules that rewrote something (matcher.apply_rule spied on)."""
    from coil.fx_passes.patterns import matcher

    names: list[str] = []
    original = matcher.apply_rule

    def spy(gm: GraphModule, rule: Any, node: Any) -> bool:
        done = original(gm, rule, node)
        if done and rule.name in ATTENTION_RULES:
            names.append(rule.name)
        return done

    monkeypatch.setattr(matcher, "apply_rule", spy)
    yield names


@pytest.mark.parametrize("name", sorted(MODELS))
def test_attention_fuses_on_captured_post_grad_graphs(name: str, fired: list[str]) -> None:
    torch.manual_seed(0)
    model = MODELS[name]()
    inputs = _inputs(name, torch.device("cpu"))
    cap = Capture()
    with torch.no_grad():
        ref = _first(model(**inputs))
        out = _first(torch.compile(model, backend=_capture_backend(cap))(**inputs))
    assert len(cap.after) == 1, "one inference graph"
    before, after = cap.before[0], cap.after[0]
    # what transformers + coil's decompositions produce: decomposed softmax, kᵀ as permute
    assert before.get("aten.bmm.default") == 2 * LAYERS, before
    assert before.get("aten.amax.default") == LAYERS and "aten._softmax.default" not in before
    assert _count(after, "scaled_dot_product") == LAYERS, after.code
    assert _count(after, "aten.bmm") == 0 and _count(after, "aten.amax") == 0
    assert len(fired) == LAYERS and set(fired) <= EXPECTED_RULE[name], fired
    torch.testing.assert_close(out, ref, atol=ATOL, rtol=ATOL)


@pytest.fixture
def post_grad_graphs(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[GraphModule]]:
    """The graphs every post-grad PassManager run returns (inside the real backend)."""
    graphs: list[GraphModule] = []
    original = PassManager.run

    def run(self: PassManager, gm: GraphModule) -> Any:
        result = original(self, gm)
        if self.stage is Stage.POST_GRAD:
            graphs.append(result.graph_module)
        return result

    monkeypatch.setattr(PassManager, "run", run)
    yield graphs


@pytest.mark.parametrize("name", ["gpt2", "bert_padded"])
def test_attention_fuses_in_coil_backend(
    name: str, device: torch.device, post_grad_graphs: list[GraphModule], fired: list[str]
) -> None:
    torch.manual_seed(0)
    model = MODELS[name]().to(device)
    inputs = _inputs(name, device)
    with torch.no_grad(), backend_knobs.override(fallback_on_error=False):
        ref = _first(model(**inputs))
        out = _first(torch.compile(model, backend="coil")(**inputs))
    assert [s.name.split("_")[0] for s in COMPILED] == ["inference"]
    assert all(s.eager_fallback is None for s in COMPILED)
    assert len(post_grad_graphs) == 1
    assert _count(post_grad_graphs[0], "scaled_dot_product") == LAYERS
    assert _count(post_grad_graphs[0], "aten.bmm") == 0
    assert len(fired) == LAYERS and set(fired) <= EXPECTED_RULE[name], fired
    torch.testing.assert_close(out, ref, atol=ATOL, rtol=ATOL)
