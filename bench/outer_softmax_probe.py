"""Softmax over a dim that is not the innermost, coil against Inductor (CUDA; session 22).

    python bench/outer_softmax_probe.py [--reps N]

Until session 22 coil ran softmax over an outer dim as four kernels (amax, exp(x - max) written
out, its sum, the division): the scheduler kept exp and the division in their own memory order,
which is not the x-then-r order of the reductions. Since then (scheduler visit_order.py) it is
one kernel. For each case, compiled with Inductor (`torch.compile` default) and coil, prints the
median time (`triton.testing.do_bench`) of both, coil / Inductor, coil's kernel count, and coil's
largest error against eager in fp64. Run with two coil wheel sets to A/B (probe_ab).
"""

from __future__ import annotations

import argparse
import functools

import coil.backend  # noqa: F401  (registers backend="coil")
import torch
import triton
from coil.backend import COMPILED

CASES = (
    ("softmax dim 1 of [32, 64, 128, 128]", (32, 64, 128, 128), 1, torch.softmax),
    ("softmax dim 0 of [8192, 4096]", (8192, 4096), 0, torch.softmax),
    ("log_softmax dim -2 of [64, 1024, 512]", (64, 1024, 512), -2, torch.log_softmax),
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=100)
    a = ap.parse_args()
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, Triton {triton.__version__}", flush=True)
    for name, shape, dim, op in CASES:
        for dt in (torch.bfloat16, torch.float32):
            torch.manual_seed(0)
            x = torch.randn(*shape, device="cuda", dtype=dt)
            fn = functools.partial(op, dim=dim)
            torch._dynamo.reset()
            COMPILED.clear()
            ind, co = torch.compile(fn), torch.compile(fn, backend="coil")
            got = co(x)
            kernels = sum(s.kernels for s in COMPILED)
            err = (got.double() - fn(x.double())).abs().max().item()
            ind(x)
            bench = functools.partial(triton.testing.do_bench, warmup=25, rep=a.reps, return_mode="median")
            t_ind, t_coil = bench(functools.partial(ind, x)), bench(functools.partial(co, x))
            print(f"  {name} {str(dt).split('.')[-1]:8s} inductor {t_ind:.4f} ms, coil {t_coil:.4f} ms, "
                  f"coil / inductor {t_coil / t_ind:.3f}, coil kernels {kernels}, max err vs fp64 {err:.1e}",
                  flush=True)


if __name__ == "__main__":
    main()
