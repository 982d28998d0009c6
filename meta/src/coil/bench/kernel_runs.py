"""One case of the gemm or attention suite in every mode, in the bench's own process.

`run_kernel(name, ctx, modes, rounds)` measures a `KernelCase` (coil.bench.kernel_case) as
coil.bench.micro measures a micro case: the inputs made once (seeded, bf16, on the bench's
device), the fp64 reference and eager's error against it, then each mode in turn on fresh caches
(`measure.cold_caches`): its first call timed from `torch.compile` on, its accuracy (every output
of the step, the gradients too, by the PyTorch benchmark harness's rule: RMSE(mode) <= 3 *
RMSE(eager) + tol / 10, tol 1e-2 for bf16) and the peak memory of a warm call; then the modes'
times in interleaved rounds (coil.bench.rounds), each mode's `ms` the median of its rounds, its
TFLOP/s from the case's `flops`, and the pairs of coil.bench.pairs compared round by round.

The `flex` mode runs the case's FlexAttention form (its block mask built before the clock) on
the same q, k, v; every other mode runs the case's function. The modes compile in their order
with the max-autotune modes (`coil_max`, then `inductor_max`) last: each cold compile resets
Dynamo, so every mode but the last compiles again on its first call of the timing phase, outside
the timing, and Inductor's max-autotune benchmarking is the compile least worth doing twice.
"""

from __future__ import annotations

import contextlib
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from coil.bench import measure
from coil.bench import spec as _spec
from coil.bench.kernel_case import Args, KernelCase, reference, step
from coil.bench.measure import compile_mode, is_coil
from coil.bench.steps import MULTIPLIER, TOL, rmse

if TYPE_CHECKING:
    import torch
    from coil.bench.micro import Ctx

__all__ = ["Prepared", "accurate", "estimate_s", "prepare", "run_kernel"]

# rough seconds of a kernel case: fixed, per compiled mode, and what max-autotune and flex add
_FIXED_S, _MODE_S, _MAX_S, _FLEX_S = 5.0, 6.0, 30.0, 10.0


@dataclass(frozen=True)
class Prepared:
    """A case's arguments (the differentiated ones requiring grad) and, for a forward and
    backward case, the output gradient every mode's step uses."""

    args: Args
    grad_out: torch.Tensor | None


def prepare(case: KernelCase, device: str, dtype: Any, small: bool = False) -> Prepared:
    """`case`'s inputs at its real size (or `small`) on `device` in `dtype`, made after
    `torch.manual_seed(0)`; the arguments at `case.grad` made leaves that require grad, and the
    output gradient drawn like the forward's output."""
    import torch

    torch.manual_seed(0)
    args = case.make(case.small if small else case.dims, device, dtype)
    if not case.grad:
        return Prepared(args, None)
    args = tuple(a.detach().requires_grad_(True) if i in case.grad else a for i, a in enumerate(args))
    with torch.no_grad():
        out = case.fn(*args)
    return Prepared(args, torch.randn(out.shape, device=out.device, dtype=torch.float32).to(out.dtype))


def accurate(errors: Sequence[float], eager: Sequence[float], tol: float = TOL) -> bool:
    """The harness's rule on every output: RMSE(mode) <= MULTIPLIER * RMSE(eager) + tol / 10
    (coil.bench.steps' constants; TOL is bf16's)."""
    return all(e <= MULTIPLIER * b + tol / 10 for e, b in zip(errors, eager, strict=True))


# the max-autotune modes compile last, Inductor's the very last (module docstring)
_LAST = {"coil_max": 1, "inductor_max": 2}


def estimate_s(case: KernelCase, modes: Sequence[str]) -> float:
    """Rough seconds `case` takes in `modes`: what `--budget-s` counts on."""
    compiled = [m for m in modes if m != "eager"]
    return (_FIXED_S + _MODE_S * len(compiled) + _MAX_S * sum(m in modes for m in ("inductor_max", "coil_max"))
            + (_FLEX_S if "flex" in modes else 0.0))


def _grad_mode(case: KernelCase) -> contextlib.AbstractContextManager[Any]:
    import torch

    return torch.enable_grad() if case.grad else torch.no_grad()


def run_kernel(case: KernelCase, ctx: Ctx, modes: Sequence[str], rounds: int) -> dict[str, Any]:
    """`case` in every mode of `modes` (module docstring); the result row of bench.json."""
    import torch

    p = prepare(case, _spec.DEVICE, torch.bfloat16)
    with _grad_mode(case):
        eager = step(case, case.fn, p.args, p.grad_out)()
    ref = reference(case, p.args, p.grad_out)
    e_rmse = [rmse(o, r) for o, r in zip(eager, ref, strict=True)]
    del eager
    res: dict[str, Any] = {"kind": "kernel", "group": case.group, "describe": case.describe, "dtype": "bf16",
                           "dims": dict(case.dims), "flops": case.flops(case.dims), "backward": bool(case.grad),
                           "reference_case": case.reference_case, "limit": case.limit, "rmse_eager": e_rmse,
                           "tol": TOL, "rounds": rounds}
    calls: dict[str, Callable[[], object]] = {}
    for mode in sorted(modes, key=lambda m: _LAST.get(m, 0)):
        r: dict[str, Any] = {}
        try:
            fn, args = case.flex(p.args) if mode == "flex" and case.flex else (case.fn, p.args)
            if is_coil(mode):
                import coil.backend as cb

                cb.reset()
            with _grad_mode(case), measure.cold_caches(ctx.root, f"{case.name}-{mode}"):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                call = step(case, compile_mode(fn, mode), args, p.grad_out, mode)
                outs = call()
                torch.cuda.synchronize()
                r["first_call_s"] = time.perf_counter() - t0
            r["rmse"] = [rmse(o, x) for o, x in zip(outs, ref, strict=True)]
            r["accuracy_ok"] = accurate(r["rmse"], e_rmse)
            del outs
            with _grad_mode(case):
                r.update(measure.warm_peak(call))
            if is_coil(mode):
                r["graphs"] = measure.coil_graphs()
                r.update(measure.coil_counts(r["graphs"]))
            calls[mode] = call
        except Exception as exc:
            r["error"] = f"{type(exc).__name__}: {exc}"[:800]
            traceback.print_exc()
            torch.cuda.empty_cache()
        res[mode] = r
    for m in modes:  # the modes back in their own order
        res[m] = res.pop(m)
    _time_in_rounds(case, res, calls, rounds)
    torch.cuda.empty_cache()
    return res


def _time_in_rounds(case: KernelCase, res: dict[str, Any], calls: dict[str, Callable[[], object]],
                    rounds: int) -> None:
    """Each mode's `ms` (median of `rounds` interleaved rounds) and TFLOP/s into `res`, and the
    round-by-round comparisons of coil.bench.pairs' PAIRS and of coil with Inductor's default."""
    from coil.bench.rounds import time_modes

    for mode in time_modes(res, calls, rounds, _grad_mode(case)):
        res[mode]["tflops"] = res["flops"] / (res[mode]["ms"] * 1e-3) / 1e12
