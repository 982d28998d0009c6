"""One GPT-2 training step compiled with backend="coil" on the CPU (kernels under Triton's
interpreter): the time of the step after the compiling one, then one step under cProfile.

    python bench/cpu_step_profile.py [--layers N] [--seq N] [--top N]

GPT2LMHeadModel(GPT2Config(n_layer=N, attn_implementation="eager")), random weights, fp32, batch
1 x seq tokens, loss on the inputs as labels, `loss.backward()`. Prints the timed step's seconds
and the profile's top functions by own and by cumulative time (docs/perf.md, session 26: how the
interpreter's slow paths were found).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--top", type=int, default=15)
    args = ap.parse_args()
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=args.layers, attn_implementation="eager"))
    ids = torch.randint(0, model.config.vocab_size, (1, args.seq))
    compiled = torch.compile(model, backend="coil")

    def step() -> None:
        compiled(ids, labels=ids).loss.backward()

    step()  # compiles
    t0 = time.perf_counter()
    step()
    print(f"step {time.perf_counter() - t0:.2f} s")
    prof = cProfile.Profile()
    prof.enable()
    step()
    prof.disable()
    stats = pstats.Stats(prof)
    stats.sort_stats("tottime").print_stats(args.top)
    stats.sort_stats("cumulative").print_stats(args.top)


if __name__ == "__main__":
    main()
