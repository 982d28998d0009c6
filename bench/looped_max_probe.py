"""Cross-entropy and softmax over rows too long for one block (CUDA; session 21).

    python bench/looped_max_probe.py [--reps N]

Rows longer than 16384 (a GPT-2 or Llama vocabulary) take coil's looped reductions, whose
running max is updated element by element. For each case (F.cross_entropy and softmax over
4096 x 50257 and 8192 x 32000, bf16 and fp32), compiled with Inductor (`torch.compile` default)
and coil, prints the median time (`triton.testing.do_bench`) of both and coil / Inductor, and
checks coil against eager in fp64 (max abs error printed). Run with two coil wheel sets to A/B
a codegen change (bench/gpu_session21d.sh).
"""

from __future__ import annotations

import argparse
import functools

import coil.backend  # noqa: F401  (registers backend="coil")
import torch
import torch.nn.functional as F
import triton

SHAPES = ((4096, 50257), (8192, 32000))


def _cases() -> list[tuple[str, object, tuple[torch.Tensor, ...]]]:
    out = []
    for rows, cols in SHAPES:
        for dt in (torch.bfloat16, torch.float32):
            torch.manual_seed(0)
            x = torch.randn(rows, cols, device="cuda", dtype=dt)
            t = torch.randint(0, cols, (rows,), device="cuda")
            tag = f"{rows}x{cols} {str(dt).split('.')[-1]}"
            out.append((f"cross_entropy {tag}", F.cross_entropy, (x, t)))
            out.append((f"softmax {tag}", lambda x: torch.softmax(x, -1), (x,)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=300)
    a = ap.parse_args()
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, Triton {triton.__version__}")
    for name, fn, args in _cases():
        torch._dynamo.reset()
        ind = torch.compile(fn)
        co = torch.compile(fn, backend="coil")
        got = co(*args)
        ref = fn(*(x.double() if x.is_floating_point() else x for x in args))
        err = (got.double() - ref).abs().max().item()
        ind(*args)
        t_ind = triton.testing.do_bench(functools.partial(ind, *args), warmup=50, rep=a.reps, return_mode="median")
        t_coil = triton.testing.do_bench(functools.partial(co, *args), warmup=50, rep=a.reps, return_mode="median")
        print(f"  {name:32s} inductor {t_ind:.4f} ms, coil {t_coil:.4f} ms, coil / inductor {t_coil / t_ind:.3f}, "
              f"max err vs fp64 {err:.1e}")


if __name__ == "__main__":
    main()
