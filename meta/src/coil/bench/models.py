"""The model cases of `coil bench`: every spec (the five hand-picked ones, coil.bench.classic,
and the zoo's, coil.bench.zoo_cases) in each of its step kinds (coil.bench.steps).

- `specs()`, `model_cases()`, `split(case)`: the specs by name, every case name, a case's spec
  and step kind.
- `build(case)`: the case's model (fp32, train mode) and inputs; `load(case)`: the model and
  step as the case runs them, for tools that profile one case.
- `first_call(case, mode)` builds a case's model and times its first step from `torch.compile`
  on; coil.bench.model_runs measures a case in every mode, its first calls in new processes.
- `estimate_s(case, modes, ...)`: the rough seconds a case takes, what `--budget-s` counts on.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from coil.bench.classic import SPECS
from coil.bench.measure import baseline, compile_mode
from coil.bench.spec import Inputs, ModelSpec
from coil.bench.steps import STEPS, make_step, prepare
from coil.bench.zoo_cases import zoo_specs

__all__ = ["IMPORTED_BEFORE_THE_CLOCK", "SPECS", "build", "compile_and_step", "estimate_s", "first_call",
           "load", "model_cases", "specs", "split"]

# what every mode's process imports before a first call is timed (`coil bench` runs every mode
# alike): coil's pipeline, and with it torch's Dynamo and part of Inductor's compiler
IMPORTED_BEFORE_THE_CLOCK = "coil.backend.pipeline.backend"

# rough seconds of one cold compile and first step of a compiled mode, by step kind, and the
# seconds of everything that compiles nothing (build, reference, eager's timings)
_COMPILE_S = {"infer_bf16": 25.0, "train_amp": 45.0, "train_accum": 55.0, "train_opt": 45.0}
_FIXED_S = 15.0


def specs() -> dict[str, ModelSpec]:
    """Every model spec by name: the five hand-picked ones, then the zoo's."""
    return {**SPECS, **zoo_specs()}


def model_cases() -> list[str]:
    """Every model case name, `<spec>_<step>`, specs in `specs()` order."""
    return [f"{s.name}_{k}" for s in specs().values() for k in s.steps]


def split(case: str) -> tuple[ModelSpec, str]:
    """A case's spec and step kind; ValueError when `case` names none."""
    for step in STEPS:
        if case.endswith("_" + step):
            s = specs().get(case[: -len(step) - 1])
            if s is not None and step in s.steps:
                return s, step
    raise ValueError(f"not a model case: {case!r}")


def build(case: str) -> tuple[ModelSpec, str, Any, Inputs]:
    """A case's spec, step kind, model (fp32, train mode, on the bench's device) and inputs."""
    s, step = split(case)
    model, inputs = s.make()
    return s, step, model, inputs


def load(case: str) -> tuple[Any, Callable[[Any], Any]]:
    """The model of `case` as its step runs it (bf16 and `eval()` for inference) and the step
    as a function of the model (the module, or its compiled form): `step(model)` runs once."""
    s, step, model, inputs = build(case)
    model, inputs = prepare(model, inputs, step)
    return model, lambda m: make_step(s, step, m, inputs)()


def first_call(case: str, mode: str) -> tuple[float, Callable[[], Any], dict[str, float]]:
    """Seconds of the first call of `case` in `mode` in this process, the step it ran (to call
    again) and the device memory the model and inputs held before the compile
    (`measure.baseline`). The clock runs from `torch.compile` to the end of the first step:
    Inductor imports its compiler inside `torch.compile`, coil imports what its pipeline does
    not during its first compile, and a user waits for both. What every mode's process has
    imported before (torch, Dynamo, sympy, the model's library, coil's pipeline:
    `IMPORTED_BEFORE_THE_CLOCK`) is not counted."""
    s, step, model, inputs = build(case)
    model, inputs = prepare(model, inputs, step)
    base = baseline()
    seconds, call, _ = compile_and_step(s, step, model, inputs, mode)
    return seconds, call, base


def compile_and_step(spec: ModelSpec, step: str, model: Any, inputs: Inputs, mode: str
                     ) -> tuple[float, Callable[[], Any], Any]:
    """`model` compiled by `mode` and its first step: the seconds from `torch.compile` to the end
    of the step (synchronised), the step (to call again) and the step's result."""
    import torch

    torch.cuda.synchronize()
    t0 = time.perf_counter()
    f = compile_mode(model, mode)
    call = make_step(spec, step, f, inputs, mode)
    out = call()
    torch.cuda.synchronize()
    return time.perf_counter() - t0, call, out


def estimate_s(case: str, modes: tuple[str, ...], *, quick: bool = False, warm_runs: int = 3,
               apart: bool = False) -> float:
    """Rough seconds `case` takes in `modes`: each compiled mode's cold compile in a new process,
    its warm starts and the bench process's compile from the caches (`quick`: one cold compile
    in the bench's process), plus what compiles nothing, once a case (`apart`: once a mode,
    each mode building the model in a process of its own). What `--budget-s` skips a case by."""
    step = next((k for k in STEPS if case.endswith("_" + k)), "infer_bf16")
    compile_s = _COMPILE_S[step]
    per_mode = compile_s + 5.0 if quick else compile_s * (1.3 + 0.5 * warm_runs)
    return _FIXED_S * (len(modes) if apart else 1) + per_mode * sum(1 for m in modes if m != "eager")
