"""torch's associative_scan in compiled code: with combine_mode="pointwise" (what transformers'
Mamba uses on a GPU) it reaches coil as one higher-order op, which coil expands into ATen ops
(fx-passes `expand_associative_scans`) and compiles natively, forward and backward. Oracles, in
fp64: the recurrence run step by step for the values; for the gradients the same module run
uncompiled, through torch's own backward of the op (which fails torch.autograd.gradcheck for the
gradient of the decay gates in torch 2.15: a compiler reproduces what the program computes)."""

from __future__ import annotations

import copy
import importlib

import pytest
import torch
import torch.nn as nn
from coil.backend import COMPILED
from coil.bench import zoo
from coil.knobs import knobs
from torch._higher_order_ops.associative_scan import associative_scan


class SelectiveScan(nn.Module):
    """h_t = a_t * decay * h_{t-1} + b_t along dim 1, a_t in (0, 1) and b_t from the input; with
    `lifted` the decay is a buffer the combine function closes over (a lifted input of the op:
    torch computes no gradient for those), else it scales a_t before the scan (what transformers'
    Mamba does: its combine function closes over nothing)."""

    def __init__(self, width: int, reverse: bool, lifted: bool = True) -> None:
        super().__init__()
        self.wa = nn.Parameter(torch.randn(width, width) / width**0.5)
        self.wb = nn.Parameter(torch.randn(width, width) / width**0.5)
        self.register_buffer("decay", torch.rand(width) * 0.5 + 0.5)
        self.reverse = reverse
        self.lifted = lifted

    def gates(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.sigmoid(x @ self.wa), x @ self.wb

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = self.gates(x)
        decay = self.decay
        assert isinstance(decay, torch.Tensor)

        def combine(left: tuple[torch.Tensor, torch.Tensor], right: tuple[torch.Tensor, torch.Tensor]
                    ) -> tuple[torch.Tensor, torch.Tensor]:
            return left[0] * right[0] * decay, right[0] * decay * left[1] + right[1]

        def combine_plain(left: tuple[torch.Tensor, torch.Tensor], right: tuple[torch.Tensor, torch.Tensor]
                          ) -> tuple[torch.Tensor, torch.Tensor]:
            return left[0] * right[0], right[0] * left[1] + right[1]

        if not self.lifted:
            a, combine = a * decay, combine_plain
        _, h = associative_scan(combine, (a, b), dim=1, reverse=self.reverse, combine_mode="pointwise")
        return torch.tanh(h)

    def stepwise(self, x: torch.Tensor) -> torch.Tensor:
        """The same recurrence, one step at a time."""
        a, b = self.gates(x)
        steps = range(x.shape[1] - 1, -1, -1) if self.reverse else range(x.shape[1])
        h, out = None, torch.empty_like(b)
        for t in steps:
            h = b[:, t] if h is None else a[:, t] * self.decay * h + b[:, t]
            out[:, t] = h
        return torch.tanh(out)


def _eager_graphs() -> list[str]:
    return [f"{s.name}: {s.eager_fallback}" for s in COMPILED if s.eager_fallback is not None]


@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
@pytest.mark.parametrize("length", [1, 6, 13])
@pytest.mark.parametrize("lifted", [True, False], ids=["lifted", "plain"])
def test_pointwise_scan_compiles_natively_and_trains(device: torch.device, lifted: bool, length: int,
                                                     reverse: bool) -> None:
    torch.manual_seed(0)
    model = SelectiveScan(8, reverse, lifted).to(device)
    x = torch.randn(3, length, 8, device=device)
    ref = model.double()
    want = ref.stepwise(x.double())
    ref(x.double()).square().sum().backward()
    grads = {n: torch.zeros_like(p) if p.grad is None else p.grad.clone() for n, p in ref.named_parameters()}
    ref.zero_grad()
    model = ref.float()
    with knobs.override(fallback_on_error=False):
        got = torch.compile(model, backend="coil")(x)
        got.square().sum().backward()
    assert not _eager_graphs(), _eager_graphs()
    assert sorted(s.name.split("_")[0] for s in COMPILED) == ["backward", "forward"]
    torch.testing.assert_close(got.double(), want, atol=1e-5, rtol=1e-4)
    for n, p in model.named_parameters():
        got_grad = torch.zeros_like(p) if p.grad is None else p.grad  # a gate a length-1 scan never reads
        torch.testing.assert_close(got_grad.double(), grads[n], atol=1e-4, rtol=1e-4, msg=f"gradient of {n}")


@pytest.fixture
def pointwise_scans(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every associative_scan call made with combine_mode="pointwise", as transformers asks for
    on a GPU (it picks "generic" on the CPU). Under torch 2.11, whose Dynamo reports export
    inside torch.compile, transformers scans with its sequential loop instead, and the Mamba
    tests below check that path."""
    module = importlib.import_module("torch._higher_order_ops.associative_scan")
    original = module.associative_scan

    def pointwise(combine_fn, xs, dim, reverse=False, combine_mode="pointwise"):  # type: ignore[no-untyped-def]
        return original(combine_fn, xs, dim, reverse=reverse, combine_mode="pointwise")

    monkeypatch.setattr(module, "associative_scan", pointwise)


def test_mamba_with_the_gpu_scan_compiles_natively(pointwise_scans: None) -> None:
    cpu = torch.device("cpu")
    model, inputs = zoo.build("mamba", "tiny", cpu, torch.float32)
    model.eval()
    with torch.no_grad():
        want = zoo.forward("mamba", model, inputs)
        with knobs.override(fallback_on_error=True):
            got = zoo.forward("mamba", torch.compile(model, backend="coil"), inputs)
    assert COMPILED and not _eager_graphs(), _eager_graphs()
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_mamba_with_the_gpu_scan_trains_natively(pointwise_scans: None) -> None:
    """One training step. Oracle: the same program through AOTAutograd and eager kernels
    (`aot_eager`): for the scan's decay gates (A_log) torch's backward of the op gives other
    values compiled than uncompiled (5 of 1024 A_log gradients, in fp64 too), and torch's own
    gradcheck fails it uncompiled; coil must compute what the traced program computes."""
    cpu = torch.device("cpu")
    model, inputs = zoo.build("mamba", "tiny", cpu, torch.float32)
    twin = copy.deepcopy(model)
    want = zoo.loss("mamba", torch.compile(model, backend="aot_eager"), inputs)
    want.backward()
    with knobs.override(fallback_on_error=True):
        got = zoo.loss("mamba", torch.compile(twin, backend="coil"), inputs)
        got.backward()
    coil_graphs = [s for s in COMPILED if s.name.startswith(("forward", "backward"))]
    assert len(coil_graphs) == 2 and not _eager_graphs(), _eager_graphs()
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    for (name, p), q in zip(twin.named_parameters(), model.parameters(), strict=True):
        assert (p.grad is None) == (q.grad is None), name
        if p.grad is not None:
            torch.testing.assert_close(p.grad, q.grad, atol=1e-4, rtol=1e-4, msg=f"gradient of {name}")


def test_a_scan_of_a_symbolic_length_runs_inside_compiled_code(device: torch.device) -> None:
    """Not expanded (the recursion unrolls over the length): the op is called by the wrapper."""
    torch.manual_seed(0)
    model = SelectiveScan(8, reverse=False).to(device)
    compiled = torch.compile(model, backend="coil", dynamic=True)
    with torch.no_grad(), knobs.override(fallback_on_error=True):
        for length in (5, 9):
            x = torch.randn(2, length, 8, device=device)
            torch.testing.assert_close(compiled(x), model.stepwise(x), atol=1e-5, rtol=1e-4)
    assert COMPILED and not _eager_graphs(), _eager_graphs()
