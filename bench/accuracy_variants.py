"""Which coil setting moves a training-step accuracy check: the `coil bench` RMSE rule for one
model case under several environment variants, each in its own process.

    python bench/accuracy_variants.py CASE 'ENV=..;ENV=..' ...   (a variant '' = defaults)

Prints, per variant, the worst ratio RMSE(coil vs fp64) / (3 * RMSE(eager vs fp64) + tol/10)
and the failing tensors (0 = the loss, i = the (i-1)-th parameter's gradient, with its name).
"""

from __future__ import annotations

import os
import subprocess
import sys


def one(case: str) -> None:
    import copy

    import torch
    from coil.backend import bench_models as bm

    spec, _ = bm._split(case)
    base = bm._model(spec)
    names = [n for n, p in base.named_parameters()]
    inputs = spec.inputs(base)
    m64 = copy.deepcopy(base).to(torch.float64)
    refs = [bm._train_step(spec, m64, inputs, amp=False), *bm._grads(m64)]
    del m64
    e = copy.deepcopy(base)
    e_rmse = [bm._rmse(a, r) for a, r in zip([bm._train_step(spec, e, inputs), *bm._grads(e)], refs, strict=True)]
    m = copy.deepcopy(base)
    f = torch.compile(m, backend="coil")
    got = [bm._train_step(spec, f, inputs), *bm._grads(m)]
    ratios = [bm._rmse(a, b) / (bm.MULTIPLIER * x + bm.TOL / 10) for a, b, x in zip(got, refs, e_rmse, strict=True)]
    bad = [(i, round(r, 2), "loss" if i == 0 else names[i - 1]) for i, r in enumerate(ratios) if r > 1]
    print(f"worst {max(ratios):.3f}; failing {bad[:8]}", flush=True)


def main(argv: list[str]) -> int:
    if argv[1] == "--one":
        one(argv[2])
        return 0
    case = argv[1]
    for variant in argv[2:] or [""]:
        env = dict(os.environ)
        for kv in filter(None, variant.split(";")):
            k, v = kv.split("=", 1)
            env[k] = v
        print(f"{case} [{variant or 'defaults'}]: ", end="", flush=True)
        subprocess.run([sys.executable, __file__, "--one", case], env=env, check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
