"""The zoo's CPU twin at changing shapes: a decoder and an encoder (padding mask) called at three
batch sizes and three sequence lengths compile at most twice (static first, then Dynamo's
automatic dynamic makes batch and sequence symbolic, and that graph serves every later shape),
run no graph eagerly, and equal eager at every shape: in inference (the logits) and in training
(the loss and every gradient; a forward and a backward graph, each compiled at most twice)."""

from __future__ import annotations

import copy

import pytest
import torch
from coil.backend import COMPILED
from coil.bench import zoo
from coil.knobs import knobs

BATCHES, SEQS = (2, 3, 5), (8, 12, 20)
# the first two calls change both dims; the rest visit every other pair
SHAPES = [(2, 8), (3, 12)] + [(b, s) for b in BATCHES for s in SEQS if (b, s) not in ((2, 8), (3, 12))]


def _inputs(name: str, model: torch.nn.Module, batch: int, seq: int) -> dict[str, torch.Tensor]:
    """Token ids (and, for an encoder, a mask padding every odd row after 3/4 of its tokens)."""
    g = torch.Generator().manual_seed(batch * 100 + seq)
    ids = torch.randint(3, int(model.config.vocab_size), (batch, seq), generator=g)
    out = {"input_ids": ids}
    if zoo.entry(name).kind == "encoder":
        mask = torch.ones(batch, seq, dtype=torch.long)
        mask[1::2, (3 * seq) // 4:] = 0
        out["attention_mask"] = mask
    return out


@pytest.mark.parametrize("name", ["llama", pytest.param("bert", marks=pytest.mark.slow)])
def test_tiny_model_at_three_batch_sizes_and_sequence_lengths(name: str) -> None:
    model, _ = zoo.build(name, "tiny", torch.device("cpu"), torch.float32)
    model.eval()
    compiled = torch.compile(model, backend="coil")
    with knobs.override(fallback_on_error=True), torch.no_grad():
        for b, s in SHAPES:
            inputs = _inputs(name, model, b, s)
            got = zoo.forward(name, compiled, inputs)
            want = zoo.forward(name, model, inputs)
            torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4, msg=lambda m, b=b, s=s: f"{b} x {s}: {m}")
    assert COMPILED and all(s.eager_fallback is None for s in COMPILED), [(s.name, s.eager_fallback) for s in COMPILED]
    assert len(COMPILED) <= 2, [s.name for s in COMPILED]


@pytest.mark.slow  # a minute each on the interpreter; CI's training at changing shapes: test_dynamic_shapes
@pytest.mark.parametrize("name", ["llama", "bert"])
def test_tiny_model_trains_at_three_batch_sizes_and_sequence_lengths(name: str) -> None:
    model, _ = zoo.build(name, "tiny", torch.device("cpu"), torch.float32)
    twin = copy.deepcopy(model)
    compiled = torch.compile(twin, backend="coil")
    with knobs.override(fallback_on_error=True):
        for b, s in SHAPES:
            inputs = _inputs(name, model, b, s)
            model.zero_grad()
            twin.zero_grad()
            want = zoo.loss(name, model, inputs)
            want.backward()
            got = zoo.loss(name, compiled, inputs)
            got.backward()
            torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4, msg=lambda m, b=b, s=s: f"{b} x {s}: {m}")
            for (pname, p), q in zip(twin.named_parameters(), model.parameters(), strict=True):
                assert q.grad is not None and p.grad is not None, pname
                torch.testing.assert_close(p.grad, q.grad, atol=1e-4, rtol=1e-4,
                                           msg=lambda m, b=b, s=s, n=pname: f"{b} x {s}, gradient of {n}: {m}")
    assert COMPILED and all(s.eager_fallback is None for s in COMPILED), [(s.name, s.eager_fallback) for s in COMPILED]
    kinds = [s.name.split("_")[0] for s in COMPILED]
    assert sorted(set(kinds)) == ["backward", "forward"] and all(kinds.count(k) <= 2 for k in kinds), kinds
