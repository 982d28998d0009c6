"""An LM head onto an unaligned vocabulary (fx-passes `pad_matmul_strides`), end to end.

Inference with the weight a graph input: the weight's rows are padded (one copy a call) and the
logits returned are the slice [..., :vocab] of the aligned product, rows padded, as Inductor
returns them (no cat, no contiguous copy: an inference graph's outputs go to the caller alone).
Training with a weight the graph computes (the bf16 cast under AMP): that weight is padded in
place. Against eager.

The pass rewrites only CUDA products of at least 2**27 multiply-adds. On CUDA the tests use real
LM-head sizes (skipped elsewhere, with that reason); the `_cpu` tests let the pass onto small
CPU products, so that CI's interpreter runs the rewritten graphs through lowering, codegen and
the wrapper.
"""

from __future__ import annotations

import pytest
import torch
from coil.backend import COMPILED

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="CUDA only: pad_matmul_strides rewrites CUDA products of LM-head size")


def _origins() -> list[str]:
    return [o for s in COMPILED for origins in s.kernel_origins for o in origins]


def _check_padded_output(got: torch.Tensor, want: torch.Tensor, tol: float) -> None:
    vocab = want.shape[-1]
    assert got.shape == want.shape and got.stride()[-2:] == (-vocab % 8 + vocab, 1)
    torch.testing.assert_close(got.float(), want.float(), rtol=tol, atol=tol)
    (stats,) = COMPILED
    assert stats.eager_fallback is None and stats.externs == 1  # one aligned product
    assert any("constant_pad_nd" in o for o in _origins()), _origins()
    assert not any("cat" in o or "clone" in o for o in _origins()), _origins()


@pytest.mark.parametrize(("vocab", "bias"), [(37, False), (38, True)])
def test_inference_head_returns_a_slice_of_the_padded_product_cpu(pad_mm_on_cpu: None, vocab: int,
                                                                  bias: bool) -> None:
    torch.manual_seed(0)
    head = torch.nn.Linear(16, vocab, bias=bias).eval()
    x = torch.randn(2, 8, 16)
    with torch.no_grad():
        want = head(x)
        got = torch.compile(head, backend="coil")(x)
    _check_padded_output(got, want, 1e-5)
    torch.testing.assert_close(got.reshape(-1, vocab), want.reshape(-1, vocab))  # as HF's loss reads it


def test_computed_weight_is_padded_in_place_cpu(pad_mm_on_cpu: None) -> None:
    """A weight the graph computes (here w * 2, as the AMP cast is): padded in place, one pad
    kernel, no split; forward and the weight's gradient against eager."""
    torch.manual_seed(0)
    w = torch.randn(37, 16, requires_grad=True)
    x = torch.randn(2, 8, 16)

    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.linear(x, w * 2).square().mean()

    w_ref = w.detach().clone().requires_grad_(True)
    f(x, w_ref).backward()
    loss = torch.compile(f, backend="coil")(x, w)
    loss.backward()
    torch.testing.assert_close(loss, f(x, w_ref.detach()))
    assert w.grad is not None and w_ref.grad is not None
    torch.testing.assert_close(w.grad, w_ref.grad)
    assert any("constant_pad_nd" in o for o in _origins()), _origins()
    assert not any("cat" in o for o in _origins()), _origins()


@needs_cuda
@pytest.mark.parametrize(("vocab", "bias"), [(50257, False), (30522, True)])  # GPT-2's, BERT's
def test_inference_head_returns_a_slice_of_the_padded_product(vocab: int, bias: bool) -> None:
    torch.manual_seed(0)
    head = torch.nn.Linear(768, vocab, bias=bias, device="cuda", dtype=torch.bfloat16).eval()
    x = torch.randn(4, 128, 768, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        want = head(x)
        got = torch.compile(head, backend="coil")(x)
    _check_padded_output(got, want, 2e-2)


@needs_cuda
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
