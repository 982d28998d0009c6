"""The steps a model case of `coil bench` times, and how each is checked against fp64.

Step kinds (`STEPS`; a case is `<spec>_<step>`):

* `infer_bf16`: the model in bf16, `eval()`, under `torch.no_grad()` (inputs cast to bf16 once);
* `train_amp`: one training step: `zero_grad`, forward and loss under
  `torch.autocast(bfloat16)` with fp32 weights, backward (no optimizer);
* `train_accum`: gradient accumulation: `zero_grad`, then ACCUM_MICRO_STEPS micro-steps of
  forward, loss and backward under the same autocast, without `zero_grad` between them (the
  gradients add up in `.grad`); one call is the whole accumulation, its result the summed loss;
* `train_opt`: the loop people write: `train_amp`'s step, then `torch.optim.AdamW`'s step over
  the model's parameters (torch's default implementation, eager, between the compiled graphs).
  Its learning rate is OPT_LR = 0: every kernel of a real step runs and its temporaries take
  their memory, but the weights stay, so the accuracy rule still compares one step at the
  reference's weights (`train_amp`'s reference). The optimizer's state is made before a mode's
  memory baseline (`prepare`), as a model's gradients are part of it: a mode's growth is its own.

Before each step the mode's step marker runs (`measure.mark_step`: Inductor's CUDA-graph trees
learn that an iteration begins), as a training loop under that mode would.

Accuracy follows the PyTorch benchmark harness's rule against an fp64 copy of the model run
without autocast (`reference`): RMSE(mode) <= MULTIPLIER * RMSE(eager) + TOL / 10 for the output
(inference) or for the loss and every gradient (training), checked on call ACCURACY_CALL: a
CUDA-graph runner returns its eager warm-up from the first call and replays from the second (or
third) on.
"""

from __future__ import annotations

import copy
import functools
import weakref
from collections.abc import Callable
from typing import Any

from coil.bench import spec as _spec
from coil.bench.measure import mark_step
from coil.bench.spec import Inputs, ModelSpec, cast_inputs

STEPS = ("infer_bf16", "train_amp", "train_accum", "train_opt")
ACCUM_MICRO_STEPS = 4
OPT_LR = 0.0
TOL = 1e-2
MULTIPLIER = 3.0
ACCURACY_CALL = 3


def _device_type() -> str:
    return _spec.DEVICE.split(":")[0]


def prepare(model: Any, inputs: Inputs, step: str) -> tuple[Any, Inputs]:
    """The model and inputs as `step` runs them: bf16 and `eval()` for inference (the inputs'
    floating tensors cast once), the fp32 training model and inputs otherwise (`train_opt`: with
    its optimizer's state made, `optimizer_of`)."""
    import torch

    if step == "infer_bf16":
        return model.to(torch.bfloat16).eval(), cast_inputs(inputs, torch.bfloat16)
    if step == "train_opt":
        optimizer_of(model, with_state=True)
    return model, inputs


_OPTIMIZERS: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def optimizer_of(model: Any, with_state: bool = False) -> Any:
    """The AdamW optimizer (learning rate OPT_LR) of `model`'s parameters, made at the first ask
    and kept as long as the model (a compiled module's is its original module's). `with_state`:
    its state (step count, both moments of every parameter) made now, by a step on zero
    gradients, which moves no weight; the gradients are then dropped."""
    import torch

    module = getattr(model, "_orig_mod", model)
    opt = _OPTIMIZERS.get(module)
    if opt is None:
        opt = torch.optim.AdamW(module.parameters(), lr=OPT_LR)
        _OPTIMIZERS[module] = opt
    if with_state and not opt.state:
        params = [p for p in module.parameters() if p.requires_grad]
        for p in params:
            p.grad = torch.zeros_like(p)
        opt.step()
        for p in params:
            p.grad = None
    return opt


def infer_step(spec: ModelSpec, model: Any, inputs: Inputs, mode: str = "eager") -> Any:
    """The forward under `no_grad`: the tensor `spec.output` picks."""
    import torch

    mark_step(mode)
    with torch.no_grad():
        return spec.output(model, inputs)


def train_step(spec: ModelSpec, model: Any, inputs: Inputs, mode: str = "eager", *, amp: bool = True) -> Any:
    """`zero_grad`, the loss under bf16 autocast (fp32 without `amp`), backward; the loss."""
    import torch

    mark_step(mode)
    model.zero_grad(set_to_none=True)
    with torch.autocast(_device_type(), dtype=torch.bfloat16, enabled=amp):
        loss = spec.loss(model, inputs)
    loss.backward()
    return loss.detach()


def accum_step(spec: ModelSpec, model: Any, inputs: Inputs, mode: str = "eager", *, amp: bool = True,
               micro_steps: int = ACCUM_MICRO_STEPS) -> Any:
    """`zero_grad`, then `micro_steps` forward + loss + backward without `zero_grad` between
    them: the gradients accumulate. The summed loss."""
    import torch

    mark_step(mode)
    model.zero_grad(set_to_none=True)
    total = None
    for _ in range(micro_steps):
        with torch.autocast(_device_type(), dtype=torch.bfloat16, enabled=amp):
            loss = spec.loss(model, inputs)
        loss.backward()
        total = loss.detach() if total is None else total + loss.detach()
    return total


def opt_step(spec: ModelSpec, model: Any, inputs: Inputs, mode: str = "eager", *, amp: bool = True) -> Any:
    """`train_step`, then the optimizer's step (`optimizer_of`); the loss."""
    loss = train_step(spec, model, inputs, mode, amp=amp)
    optimizer_of(model).step()
    return loss


_STEP_FNS: dict[str, Callable[..., Any]] = {"infer_bf16": infer_step, "train_amp": train_step,
                                            "train_accum": accum_step, "train_opt": opt_step}


def make_step(spec: ModelSpec, step: str, model: Any, inputs: Inputs, mode: str = "eager") -> Callable[[], Any]:
    """One call of `step` on `model` (the module or its compiled form) and `inputs`, under `mode`."""
    return functools.partial(_STEP_FNS[step], spec, model, inputs, mode)


def grads(model: Any) -> list[Any]:
    """Copies of the model's gradients, in parameter order (those that have one)."""
    return [p.grad.detach().clone() for p in model.parameters() if p.grad is not None]


def checked(step: str, out: Any, model: Any) -> list[Any]:
    """The tensors a step's accuracy is judged on: the output (inference), else the loss and
    every gradient."""
    return [out] if step == "infer_bf16" else [out, *grads(model)]


def model_fp64(base: Any) -> Any:
    """A float64 copy of `base` (left untouched) that runs in float64: a transformers mixture of
    experts computes its experts there with transformers' "eager" loop, since the grouped GEMM it
    otherwise picks has no float64 kernel."""
    import torch

    m64 = copy.deepcopy(base).to(torch.float64)
    if getattr(getattr(m64, "config", None), "_experts_implementation", "eager") not in (None, "eager"):
        m64.set_experts_implementation("eager")
    return m64


def reference(spec: ModelSpec, step: str, base: Any, inputs: Inputs) -> list[Any]:
    """The fp64 reference of `step`: a float64 copy of `base` (fp32, untouched) run without
    autocast on float64 inputs; `checked`'s tensors. A transformers mixture of experts computes
    its experts in the reference with transformers' "eager" implementation (a loop over the
    experts): the grouped GEMM it picks on a GPU has no float64 kernel (`model_fp64`)."""
    import torch

    m64 = model_fp64(base)
    x64 = cast_inputs(inputs, torch.float64)
    if step == "infer_bf16":
        m64.eval()
        return [infer_step(spec, m64, x64)]
    fn = accum_step if step == "train_accum" else train_step  # train_opt at OPT_LR: train_amp's
    out = fn(spec, m64, x64, amp=False)
    return checked(step, out, m64)


def rmse(a: Any, ref: Any) -> float:
    """Root mean square error of `a` against `ref`, in fp64 on `ref`'s device (the host: the
    bench keeps its references there)."""
    import torch

    return float(torch.sqrt(torch.mean((a.detach().to(ref.device, torch.float64) - ref.double()) ** 2)))


def ratios(got: list[Any], refs: list[Any], eager_rmse: list[float]) -> list[float]:
    """Each checked tensor's RMSE against its reference over what the rule allows
    (MULTIPLIER * eager's RMSE + TOL / 10): a ratio over 1 fails."""
    return [rmse(a, b) / (MULTIPLIER * e + TOL / 10) for a, b, e in zip(got, refs, eager_rmse, strict=True)]
