"""A backward graph's tangents read through a pointer table (coil.backend.pipeline.indirect_inputs),
end to end: backend="coil", its Triton kernels (the CPU interpreter here, with
COIL_INDIRECT_INPUTS=always; on a GPU the default `auto` applies to the CUDA-graph runs).

Oracle: eager PyTorch's gradients for the same inputs and incoming gradients. The wrapper source
shows which graphs read their tangents through the table.
"""

from __future__ import annotations

import pytest
import torch
from coil.backend import COMPILED
from coil.knobs import knobs

N = 512  # 512 x 512 fp32 tangents: 1 MiB, the smallest read through the table


def two_outputs(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    y = torch.sin(x) * w
    return y, torch.exp(y) + x


def _grads(fn, x, w, gy, gz):  # type: ignore[no-untyped-def]
    x, w = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    y, z = fn(x, w)
    torch.autograd.backward([y, z], [gy, gz])
    return y.detach(), z.detach(), x.grad, w.grad


TABLE_LINE = "pointer_table = pointer_table_inputs.prepare(args)"  # a wrapper reading through the table


def _tabled() -> list[str]:
    return [s.name for s in COMPILED if TABLE_LINE in s.wrapper_source]


def _mode(device: torch.device) -> str:
    """The knob value that gives CUDA-graphed backwards a table: auto on a GPU, always elsewhere."""
    return "auto" if device.type == "cuda" else "always"


@pytest.mark.parametrize("incoming", ["fresh", "misaligned"])
def test_tangents_read_through_the_table_give_eager_gradients(device: torch.device, incoming: str) -> None:
    """Each step passes new incoming gradients (new addresses); one step passes a tangent whose
    address is not 16-byte aligned (the wrapper copies it into an aligned tensor first)."""
    g = torch.Generator().manual_seed(0)
    x, w = (torch.randn(N, N, generator=g).to(device) for _ in range(2))
    compiled = torch.compile(two_outputs, backend="coil")
    with knobs.override(fallback_on_error=False, indirect_inputs=_mode(device)):
        for step in range(3):
            gy, gz = (torch.randn(N, N, generator=g).to(device) for _ in range(2))
            if incoming == "misaligned" and step == 1:
                flat = torch.empty(N * N + 1, device=device)
                gz = flat[1:].view(N, N)
                gz.copy_(torch.randn(N, N, generator=g))
                assert gz.data_ptr() % 16
            got = _grads(compiled, x, w, gy, gz)
            want = _grads(two_outputs, x, w, gy, gz)
            for a, b in zip(got, want, strict=True):
                torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    assert [n for n in _tabled() if "backward" in n], [s.name for s in COMPILED]


def test_small_tangents_and_forward_graphs_have_no_table(device: torch.device) -> None:
    x = torch.randn(64, 64, device=device, requires_grad=True)
    w = torch.randn(64, 64, device=device, requires_grad=True)
    with knobs.override(fallback_on_error=False, indirect_inputs="always"):
        y, z = torch.compile(two_outputs, backend="coil")(x, w)
        torch.autograd.backward([y, z], [torch.ones_like(y), torch.ones_like(z)])
    assert COMPILED and not _tabled()


def test_off_copies_as_before(device: torch.device) -> None:
    x = torch.randn(N, N, device=device, requires_grad=True)
    w = torch.randn(N, N, device=device, requires_grad=True)
    with knobs.override(fallback_on_error=False, indirect_inputs="0"):
        y, z = torch.compile(two_outputs, backend="coil")(x, w)
        torch.autograd.backward([y, z], [torch.ones_like(y), torch.ones_like(z)])
    assert COMPILED and not _tabled()
    assert torch.allclose(x.grad, torch.cos(x) * w * (1 + torch.exp(torch.sin(x) * w)) + 1, atol=1e-4)


def test_a_cached_backward_reads_through_its_table(device: torch.device, monkeypatch: pytest.MonkeyPatch) -> None:
    """The second compile of the same function loads the backward from coil's graph cache: its
    wrapper (source and kernels from the cache) still reads the tangents through the table."""
    monkeypatch.setenv("COIL_AOT_CACHE", "0")  # the graph cache alone (test_graph_cache.py)
    g = torch.Generator().manual_seed(1)
    x, w = (torch.randn(N, N, generator=g).to(device) for _ in range(2))
    verdicts = []
    with knobs.override(fallback_on_error=False, indirect_inputs=_mode(device)):
        for _ in range(2):
            torch._dynamo.reset()
            first = len(COMPILED)
            compiled = torch.compile(two_outputs, backend="coil")
            for _ in range(2):
                gy, gz = (torch.randn(N, N, generator=g).to(device) for _ in range(2))
                for a, b in zip(_grads(compiled, x, w, gy, gz), _grads(two_outputs, x, w, gy, gz), strict=True):
                    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
            verdicts.append([(s.name.split("_")[0], s.graph_cache) for s in COMPILED[first:]])
            back = [s for s in COMPILED[first:] if s.name.startswith("backward")]
            assert back and TABLE_LINE in back[0].wrapper_source
    assert ("backward", "miss") in verdicts[0] and ("backward", "hit") in verdicts[1], verdicts
