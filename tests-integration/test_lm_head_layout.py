"""An LM head onto an unaligned vocabulary on CUDA (fx-passes `pad_matmul_strides`), end to end.

Inference with the weight a graph input: the product is split by columns (an aligned part and
the few columns left), joined by a cat, with no padded copy of the weight. Training under AMP:
the bf16 weight the graph computes is padded in place. Both against eager, bf16 tolerances.
The pass touches CUDA products only (COIL_PAD_MM; its CPU behaviour is tested in
packages/fx-passes/tests/test_pad_mm.py), so on the CPU these tests are skipped.
"""

from __future__ import annotations

import pytest
import torch
from coil.backend import COMPILED

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="CUDA only: pad_matmul_strides rewrites CUDA products")


def _origins() -> list[str]:
    return [o for s in COMPILED for origins in s.kernel_origins for o in origins]


@pytest.mark.parametrize(("vocab", "bias"), [(50257, False), (30522, True)])  # GPT-2's, BERT's
def test_inference_head_is_split_without_padding_the_weight(vocab: int, bias: bool) -> None:
    torch.manual_seed(0)
    head = torch.nn.Linear(768, vocab, bias=bias, device="cuda", dtype=torch.bfloat16).eval()
    x = torch.randn(4, 128, 768, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        want = head(x)
        got = torch.compile(head, backend="coil")(x)
    assert got.shape == want.shape and got.stride() == want.stride()
    torch.testing.assert_close(got.float(), want.float(), rtol=2e-2, atol=2e-2)
    (stats,) = COMPILED
    assert stats.eager_fallback is None and stats.externs == 2  # the aligned part, the rest
    assert not any("constant_pad_nd" in o for o in _origins()), _origins()
    assert any("cat" in o for o in _origins()), _origins()


def test_amp_training_head_pads_its_computed_weight_in_place() -> None:
    torch.manual_seed(0)
    head = torch.nn.Linear(768, 50257, bias=False, device="cuda")
    ref = torch.nn.Linear(768, 50257, bias=False, device="cuda")
    ref.load_state_dict(head.state_dict())
    x = torch.randn(4, 128, 768, device="cuda")
    outs = []
    for fn in (ref, torch.compile(head, backend="coil")):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = fn(x)
        out.float().square().mean().backward()
        outs.append(out)
    torch.testing.assert_close(outs[1].float(), outs[0].float(), rtol=2e-2, atol=2e-2)
    assert head.weight.grad is not None and ref.weight.grad is not None
    scale = float(ref.weight.grad.abs().max())
    torch.testing.assert_close(head.weight.grad, ref.weight.grad, rtol=2e-2, atol=2e-2 * scale)
    assert any("constant_pad_nd" in o for o in _origins()), _origins()
