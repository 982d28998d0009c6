"""The training loops people write, with the model compiled by backend="coil" on the CPU (Triton's
interpreter), against the same loop run eagerly on an identical copy of the model.

Each loop pattern runs STEPS optimizer steps on both copies with the same data, and after every
step the test compares the logged losses, every parameter, every buffer (batch-norm statistics),
the optimizer's state (momentum, Adam moments, step counts) and, where used, GradScaler's scale,
within fp32 tolerances (bf16 ones under bf16 autocast). Every case also checks that coil compiled
every graph (none ran eagerly after a compile error, COIL_FALLBACK_ON_ERROR on), that the model's
forward and backward graphs hold no ATen fallback, and that the number of compiled graphs stops
growing after the first step (the second when the optimizer step itself is compiled): no
recompile every step.

Models: a 2-layer MLP with LayerNorm and GELU, and a small ConvNet with BatchNorm (training mode,
so its running statistics change every forward).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest
import torch
from check import no_eager_graphs
from coil.backend import COMPILED
from coil.knobs import knobs
from torch import Tensor, nn
from torch.nn import functional as F

STEPS = 3
SEED = 0
# fp32: the compiled graph sums in another order than eager, nothing more
FP32 = {"rtol": 1e-5, "atol": 1e-6}


class MLP(nn.Module):
    """Linear -> LayerNorm -> GELU -> Linear."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.norm = nn.LayerNorm(16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(F.gelu(self.norm(self.fc1(x))))


class ConvBN(nn.Module):
    """Conv (no bias, as before a BatchNorm) -> BatchNorm -> ReLU -> global mean -> Linear."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(4)
        self.head = nn.Linear(4, 4)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(F.relu(self.bn(self.conv(x))).mean((2, 3)))


class WithLoss(nn.Module):
    """The model and its MSE loss in one forward (as models returning their loss do), so the
    loss is an output of the compiled graph."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        out = self.model(x)
        return F.mse_loss(out.float(), y), out


def _loss_outside(model: Callable[[Tensor], Tensor]) -> Callable[[Tensor, Tensor], tuple[Tensor, Tensor]]:
    """The loss computed by the loop, eagerly, from the (compiled) model's output."""

    def call(x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        out = model(x)
        return F.mse_loss(out.float(), y), out

    return call


MODELS: dict[str, tuple[type[nn.Module], tuple[int, ...]]] = {
    "mlp": (MLP, (4, 8)),
    "conv": (ConvBN, (2, 3, 5, 5)),
}


def _optimizer(name: str, params: Iterator[nn.Parameter]) -> torch.optim.Optimizer:
    if name == "sgd":
        return torch.optim.SGD(params, lr=0.1, momentum=0.9)
    if name == "rmsprop":
        return torch.optim.RMSprop(params, lr=1e-2)
    assert name == "adamw", name
    return torch.optim.AdamW(params, lr=1e-2, weight_decay=0.01)


@dataclass
class Side:
    """One of the two runs: its module, what the loop calls for the loss and output (the module
    and its loss, or their compiled twin), its optimizer, how the loop steps it (`opt.step`, or a compiled function), an optional
    GradScaler, the batches of the model, and tensors the loop keeps alive across steps."""

    module: nn.Module
    call: Callable[[Tensor, Tensor], tuple[Tensor, Tensor]]
    opt: torch.optim.Optimizer
    step_opt: Callable[[], object]
    shape: tuple[int, ...]
    scaler: torch.amp.GradScaler | None = None
    held: list[tuple[Tensor, Tensor]] = field(default_factory=list)

    def batch(self, step: int, micro: int) -> tuple[Tensor, Tensor]:
        """The same input and target on both sides, for each step and micro-step."""
        g = torch.Generator().manual_seed(1000 * step + micro)
        x = torch.randn(self.shape, generator=g)
        return x, torch.randn(self.shape[0], 4, generator=g)

    def loss(self, step: int, micro: int = 0) -> tuple[Tensor, Tensor]:
        """The model's output on the step's batch and its MSE loss."""
        return self.call(*self.batch(step, micro))


StepFn = Callable[[Side, int], list[Tensor]]
OptStep = Callable[[torch.optim.Optimizer, nn.Module], Callable[[], object]]


def _eager_step(opt: torch.optim.Optimizer, module: nn.Module) -> Callable[[], object]:
    return opt.step


def _sides(model: str, optimizer: str, opt_step: OptStep, eager_step: OptStep,
           scaler: bool, loss_in_graph: bool) -> tuple[Side, Side]:
    """Eager and compiled sides from one initialisation; the compiled side computes its loss in
    the compiled graph, or eagerly from the compiled model's output."""
    cls, shape = MODELS[model]
    torch.manual_seed(SEED)
    eager_mod = cls()
    coil_mod = copy.deepcopy(eager_mod)
    coil_call = (torch.compile(WithLoss(coil_mod), backend="coil") if loss_in_graph
                 else _loss_outside(torch.compile(coil_mod, backend="coil")))
    sides = []
    for mod, call, make_step in ((eager_mod, WithLoss(eager_mod), eager_step),
                                 (coil_mod, coil_call, opt_step)):
        opt = _optimizer(optimizer, mod.parameters())
        sides.append(Side(mod, call, opt, make_step(opt, mod), shape,
                          torch.amp.GradScaler("cpu") if scaler else None))
    return sides[0], sides[1]


def _close(got: Tensor, expected: Tensor, what: str, tol: dict[str, float]) -> None:
    torch.testing.assert_close(got, expected, **tol, msg=lambda m: f"{what}: {m}")


def _same_state(got: Side, expected: Side, step: int, tol: dict[str, float]) -> None:
    """Parameters, gradients, buffers, optimizer state and the scaler's scale agree."""
    at = f"after step {step}"
    named = zip(got.module.named_parameters(), expected.module.parameters(), strict=True)
    for (name, p), q in named:
        _close(p, q, f"{name} {at}", tol)
        assert (p.grad is None) == (q.grad is None), f"{name}.grad {at}"
        if q.grad is not None:
            _close(p.grad, q.grad, f"{name}.grad {at}", tol)
        for key, v in expected.opt.state[q].items():
            w = got.opt.state[p][key]
            if isinstance(v, Tensor):
                _close(w, v, f"optimizer state {key} of {name} {at}", tol)
            else:
                assert w == v, f"optimizer state {key} of {name} {at}"
    buffers = zip(got.module.named_buffers(), expected.module.buffers(), strict=True)
    for (name, b), c in buffers:
        _close(b, c, f"buffer {name} {at}", tol)
    if expected.scaler is not None:
        assert got.scaler is not None
        assert got.scaler.get_scale() == expected.scaler.get_scale(), f"GradScaler scale {at}"


def _match_eager(model: str, optimizer: str, step: StepFn, *, opt_step: OptStep = _eager_step,
                 eager_step: OptStep = _eager_step, scaler: bool = False,
                 tol: dict[str, float] = FP32, settle: int = 0,
                 loss_in_graph: bool = True) -> tuple[Side, Side]:
    """Run `step` STEPS times on an eager and a compiled side (stepping the optimizer through
    `eager_step` and `opt_step`); after each step compare what it logged and the whole training
    state. Then: no graph ran eagerly, no graph was compiled after step `settle`, and the
    model's forward and backward graphs hold no ATen fallback."""
    eager, coil = _sides(model, optimizer, opt_step, eager_step, scaler, loss_in_graph)
    compiled = []
    with knobs.override(fallback_on_error=True):
        for k in range(STEPS):
            expected = step(eager, k)
            got = step(coil, k)
            assert len(got) == len(expected)
            for i, (g, e) in enumerate(zip(got, expected, strict=True)):
                _close(g, e, f"logged value {i} of step {k}", tol)
            _same_state(coil, eager, k, tol)
            compiled.append(len(COMPILED))
    no_eager_graphs()
    assert compiled[settle:] == [compiled[settle]] * (STEPS - settle), \
        f"graphs compiled by the end of each step: {compiled}"
    assert any(s.name.startswith("backward") for s in COMPILED), [s.name for s in COMPILED]
    model_fallbacks = [(s.name, s.fallbacks) for s in COMPILED
                       if s.fallbacks and s.name.startswith(("forward", "backward"))]
    assert not model_fallbacks, f"ATen fallbacks in the model's graphs: {model_fallbacks}"
    return eager, coil


# the loop patterns ----------------------------------------------------------------------------


def _plain(side: Side, k: int) -> list[Tensor]:
    side.opt.zero_grad()
    loss, _ = side.loss(k)
    loss.backward()
    side.step_opt()
    return [loss.detach()]


def _accumulate(n: int, set_to_none: bool = True) -> StepFn:
    def step(side: Side, k: int) -> list[Tensor]:
        side.opt.zero_grad(set_to_none=set_to_none)
        losses = []
        for micro in range(n):
            loss, _ = side.loss(k, micro)
            (loss / n).backward()
            losses.append(loss.detach())
        side.step_opt()
        return losses

    return step


@pytest.mark.parametrize("model", list(MODELS))
@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_plain_loop(model: str, optimizer: str) -> None:
    """zero_grad() (gradients set to None), forward, backward, step: three steps equal eager's."""
    _match_eager(model, optimizer, _plain)


@pytest.mark.parametrize("model", list(MODELS))
@pytest.mark.parametrize("micro_steps", [2, 3])
def test_gradient_accumulation(model: str, micro_steps: int) -> None:
    """Gradients accumulated over N micro-steps (each loss divided by N), one AdamW step per N
    backward passes: every micro-step's loss and the state after each step equal eager's."""
    _match_eager(model, "adamw", _accumulate(micro_steps))


@pytest.mark.parametrize("model", list(MODELS))
def test_zero_grad_keeps_tensors(model: str) -> None:
    """zero_grad(set_to_none=False): the gradients stay the same tensors, zeroed, and each
    backward (two micro-steps a step) accumulates into them in place; values equal eager's, and
    the compiled side keeps each .grad tensor across steps as eager does."""
    seen: dict[int, list[int]] = {}

    def step(side: Side, k: int) -> list[Tensor]:
        logged = _accumulate(2, set_to_none=False)(side, k)
        grads = [id(p.grad) for p in side.module.parameters()]
        assert seen.setdefault(id(side), grads) == grads, "a .grad tensor was replaced"
        return logged

    _match_eager(model, "sgd", step)


@pytest.mark.parametrize("model", list(MODELS))
@pytest.mark.parametrize("loss_in_graph", [True, False], ids=["loss-compiled", "loss-eager"])
def test_previous_loss_held(model: str, loss_in_graph: bool) -> None:
    """The loop keeps every step's loss (not detached) and output alive, as a logging list does,
    and reads the previous step's loss with .item() only after the next step ran: the values it
    reads then, and all of them at the end, equal eager's. The loss is a compiled graph's
    output, or computed eagerly from the compiled model's output."""

    def step(side: Side, k: int) -> list[Tensor]:
        side.opt.zero_grad()
        loss, out = side.loss(k)
        loss.backward()
        side.step_opt()
        side.held.append((loss, out))
        if k == 0:
            return []
        previous, previous_out = side.held[k - 1]
        return [torch.tensor(previous.item()), previous_out.detach().clone()]

    eager, coil = _match_eager(model, "adamw", step, loss_in_graph=loss_in_graph)
    for k, ((loss, out), (ref_loss, ref_out)) in enumerate(zip(coil.held, eager.held, strict=True)):
        assert loss.grad_fn is not None
        _close(torch.tensor(loss.item()), torch.tensor(ref_loss.item()), f"held loss {k}", FP32)
        _close(out.detach(), ref_out.detach(), f"held output {k}", FP32)


# bf16 autocast: coil keeps fused intermediates in fp32 where eager rounds each op's result to
# bf16, so the two differ by bf16 roundings (2**-8 relative), as Inductor's do; measured against
# the loop in fp32 without autocast, coil's gradients are as close as eager's
BF16 = {"rtol": 1.6e-2, "atol": 1e-3}


@pytest.mark.parametrize("model", list(MODELS))
def test_grad_scaler_bf16_autocast(model: str) -> None:
    """torch.amp.GradScaler("cpu") with bf16 autocast: scale(loss).backward(), unscale_,
    clip_grad_norm_, scaler.step, update. Losses, gradient norms, state and the scale equal
    eager's within bf16 roundings. SGD, whose update is linear in the gradient: AdamW's first
    step is lr * g / |g| per element, so a bf16 rounding of a gradient near zero flips it."""

    def step(side: Side, k: int) -> list[Tensor]:
        assert side.scaler is not None
        side.opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss, _ = side.loss(k)
        side.scaler.scale(loss).backward()
        side.scaler.unscale_(side.opt)
        norm = nn.utils.clip_grad_norm_(side.module.parameters(), max_norm=0.5)
        side.scaler.step(side.opt)
        side.scaler.update()
        return [loss.detach(), norm]

    _match_eager(model, "sgd", step, scaler=True, tol=BF16)


@pytest.mark.parametrize("model", list(MODELS))
@pytest.mark.parametrize("clip", ["norm", "value"])
def test_gradient_clipping(model: str, clip: str) -> None:
    """clip_grad_norm_ (the total norm logged; the threshold below it, so it clips) or
    clip_grad_value_ between backward and an SGD step: equal to eager after every step."""

    def step(side: Side, k: int) -> list[Tensor]:
        side.opt.zero_grad()
        loss, _ = side.loss(k)
        loss.backward()
        logged = [loss.detach()]
        if clip == "norm":
            norm = nn.utils.clip_grad_norm_(side.module.parameters(), max_norm=0.05)
            assert norm > 0.05, "the gradients were not clipped"
            logged.append(norm)
        else:
            nn.utils.clip_grad_value_(side.module.parameters(), clip_value=0.01)
        side.step_opt()
        return logged

    _match_eager(model, "sgd", step)


def _compiled_method(opt: torch.optim.Optimizer, module: nn.Module) -> Callable[[], object]:
    """`torch.compile(opt.step, backend="coil")`."""
    return torch.compile(opt.step, backend="coil")


def _clip_and_step(opt: torch.optim.Optimizer, module: nn.Module) -> Callable[[], object]:
    """A function that clips the gradients' norm and steps the optimizer."""

    def clip_and_step() -> None:
        nn.utils.clip_grad_norm_(module.parameters(), max_norm=0.05)
        opt.step()

    return clip_and_step


def _compiled_function(opt: torch.optim.Optimizer, module: nn.Module) -> Callable[[], object]:
    """`_clip_and_step` compiled by coil."""
    return torch.compile(_clip_and_step(opt, module), backend="coil")


@pytest.mark.parametrize(("optimizer", "how"), [
    ("sgd", "method"), ("adamw", "method"), ("rmsprop", "method"),
    ("sgd", "function"), ("adamw", "function"),
])
def test_compiled_optimizer_step(optimizer: str, how: str) -> None:
    """The optimizer step compiled by coil (the method itself, or a compiled function that also
    clips the gradients' norm) against the same step uncompiled. RMSprop counts its steps with
    `step += 1` on a state tensor its update then does not read: the count must advance (it is
    compared as optimizer state). SGD creates its momentum buffers in its first step, so its
    second step traces another graph: the count of graphs may grow up to the second step, not
    after."""
    if how == "method":
        _match_eager("mlp", optimizer, _plain, opt_step=_compiled_method, settle=1)
    else:
        _match_eager("mlp", optimizer, _plain, opt_step=_compiled_function,
                     eager_step=_clip_and_step, settle=1)
