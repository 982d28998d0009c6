"""Per-tensor errors of one training step against fp64: eager, eager channels-last, coil.

    python bench/grad_error_probe.py CASE [--seeds N] [--names REGEX] [--no-coil]

For each seed (model weights and inputs drawn from it): the fp64 reference step, eager AMP,
eager AMP with the model and inputs in channels-last memory format (what cuDNN computes when the
layout is NHWC: the oracle for "is this error the layout's or coil's?"), and coil (under the
environment this process runs in: set COIL_* variables to compare variants). Prints, for the
loss and every parameter gradient whose coil ratio (the `coil bench` RMSE rule: RMSE / (3 *
RMSE(eager) + tol / 10)) exceeds 0.5 or whose name matches --names: the reference's RMS, the
RMSE of eager, eager channels-last and coil, and the ratios.
"""

from __future__ import annotations

import argparse
import copy
import re
import sys
from typing import Any

import torch


def _step(bm: Any, spec: Any, model: Any, inputs: tuple[Any, ...], amp: bool, cl: bool = False) -> list[Any]:
    if cl:
        inputs = tuple(x.to(memory_format=torch.channels_last) if x.dim() == 4 else x for x in inputs)
    loss = bm._train_step(spec, model, inputs, amp=amp)
    return [loss, *bm._grads(model)]


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("case")
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--names", default="")
    p.add_argument("--no-coil", action="store_true")
    a = p.parse_args(argv[1:])
    from coil.backend import bench_models as bm

    spec, _ = bm._split(a.case)
    for seed in range(a.seeds):
        torch.manual_seed(seed)
        base = bm._model(spec)
        names = ["loss"] + [n for n, _ in base.named_parameters()]
        inputs = spec.inputs(base)
        m64 = copy.deepcopy(base).to(torch.float64)
        ref = _step(bm, spec, m64, inputs, amp=False)
        del m64
        eager = _step(bm, spec, copy.deepcopy(base), inputs, amp=True)
        mcl = copy.deepcopy(base).to(memory_format=torch.channels_last)
        eager_cl = _step(bm, spec, mcl, inputs, amp=True, cl=True)
        del mcl
        coil: list[Any] = []
        if not a.no_coil:
            torch._dynamo.reset()
            m = copy.deepcopy(base)
            f = torch.compile(m, backend="coil")
            coil = _step(bm, spec, f, inputs, amp=True)
            coil = [coil[0], *bm._grads(m)]
        print(f"\n== {a.case} seed {seed}: name | ref rms | rmse eager | eager-CL | coil | ratio eager-CL | ratio coil")
        worst = 0.0
        for i, name in enumerate(names):
            r = ref[i].double()
            e = bm._rmse(eager[i], r)
            ecl = bm._rmse(eager_cl[i], r)
            c = bm._rmse(coil[i], r) if coil else float("nan")
            denom = bm.MULTIPLIER * e + bm.TOL / 10
            rc, rcl = c / denom, ecl / denom
            worst = max(worst, rc) if coil else worst
            if rc > 0.5 or rcl > 0.5 or (a.names and re.search(a.names, name)):
                rms = float(torch.sqrt(torch.mean(r * r)))
                print(f"  {name:40s} {rms:10.3e} {e:10.3e} {ecl:10.3e} {c:10.3e} {rcl:6.2f} {rc:6.2f}")
        print(f"  worst coil ratio {worst:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
