"""Multi-query attention written without `repeat_kv` (HF Falcon's older architecture: one key and
value head for every query head, broadcast by SDPA) under coil. CUDA's fused SDPA kernels take
only equal head counts, so fx-passes' `widen_broadcast_kv` widens the key and value first and
the wrapper calls a fused kernel instead of the math path's materialised scores; the CPU's flash
kernel broadcasts by itself and the call stays as written. Checked on the wrapper coil generates
and against eager, inference and a training step."""

from __future__ import annotations

import pytest
import torch
from check import zoo_training_step_matches_eager
from coil.backend import COMPILED
from coil.bench import zoo
from coil.knobs import knobs

pytest.importorskip("transformers")

_FUSED = {"cuda": ("_flash_attention", "_efficient_attention", "_cudnn_attention"),
          "cpu": ("_flash_attention_for_cpu",)}


def _sdpa_lines(first: int) -> list[str]:
    return [ln.strip() for s in COMPILED[first:] for ln in s.wrapper_source.splitlines() if "scaled_dot_product" in ln]


def test_falcon_inference_calls_a_fused_kernel(device: torch.device) -> None:
    model, inputs = zoo.build("falcon", "tiny", str(device), torch.float32)
    model.eval()
    first = len(COMPILED)
    with knobs.override(fallback_on_error=False), torch.no_grad():
        want = zoo.forward("falcon", model, inputs)
        got = zoo.forward("falcon", torch.compile(model, backend="coil"), inputs)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    lines = _sdpa_lines(first)
    assert lines and all(any(k in ln for k in _FUSED[device.type]) for ln in lines), lines


def test_falcon_training_step_matches_eager_through_a_fused_kernel(device: torch.device) -> None:
    lines = zoo_training_step_matches_eager("falcon", device)
    assert any("backward" in ln for ln in lines), lines
    assert all(any(k in ln for k in _FUSED[device.type]) for ln in lines), lines


@pytest.mark.slow  # 45 s on the interpreter; the pass at symbolic sizes: fx-passes' test_sdpa_broadcast
def test_widened_on_the_cpu_too_falcon_trains_at_changing_shapes_equal_to_eager(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The rule applied on the CPU as well (where it only adds a copy), so that the widening runs
    through the whole pipeline here: Dynamo, pre-grad passes, AOTAutograd, coil. Three batch and
    sequence sizes (the second makes Dynamo's sizes symbolic): every call widened its SDPA calls,
    loss and gradients equal eager's, each graph compiled at most twice, none run eagerly."""
    from coil.fx_passes.passes import sdpa_broadcast

    widened: list[bool] = []
    rule = sdpa_broadcast.broadcast_kv_widened

    def spy(gm: torch.fx.GraphModule, devices: object) -> object:
        res = rule(gm, devices)  # type: ignore[arg-type]
        widened.append(res.modified)
        return res

    monkeypatch.setattr(sdpa_broadcast, "FUSED_NEED_EQUAL_HEADS", frozenset({"cpu", "cuda"}))
    monkeypatch.setattr(sdpa_broadcast, "broadcast_kv_widened", spy)
    model, _ = zoo.build("falcon", "tiny", "cpu", torch.float32)
    twin, _ = zoo.build("falcon", "tiny", "cpu", torch.float32)
    twin.load_state_dict(model.state_dict())
    compiled = torch.compile(twin, backend="coil")
    first = len(COMPILED)
    with knobs.override(fallback_on_error=False):
        for batch, seq in ((2, 8), (3, 12), (5, 20)):
            ids = torch.randint(3, int(model.config.vocab_size), (batch, seq),
                                generator=torch.Generator().manual_seed(batch))
            model.zero_grad()
            twin.zero_grad()
            want = zoo.loss("falcon", model, {"input_ids": ids})
            want.backward()
            got = zoo.loss("falcon", compiled, {"input_ids": ids})
            got.backward()
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
            for (n, a), b in zip(twin.named_parameters(), model.parameters(), strict=True):
                torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-5, msg=n)
    assert widened and all(widened), widened
    kinds = [s.name.split("_")[0] for s in COMPILED[first:]]
    assert all(s.eager_fallback is None for s in COMPILED[first:])
    assert sorted(set(kinds)) == ["backward", "forward"] and all(kinds.count(k) <= 2 for k in kinds), kinds
