"""Where the host (CPU) time of a compiled step goes: cProfile over warm iterations.

    python bench/host_profile.py CASE [MODE] [--top N]   (CASE: a `coil bench` model case, e.g.
                                                          llama_style_train_amp; MODE: coil | inductor)

Compiles, warms up 3 steps, then profiles 10 steps (each followed by a synchronize, so the GPU
never runs far behind) and prints the wall time per step and the top functions by own time and
by cumulative time. A CPU-bound step spends its time in Python here, not waiting on the GPU.
"""

from __future__ import annotations

import cProfile
import pstats
import sys
import time

import torch


def main(argv: list[str]) -> int:
    case = argv[1]
    mode = argv[2] if len(argv) > 2 and not argv[2].startswith("--") else "coil"
    top = int(argv[argv.index("--top") + 1]) if "--top" in argv else 30
    from coil.backend import bench_models as bm
    from profile_model import _model  # bench/ is on sys.path when this file runs as a script

    model, run = _model(case)
    f = bm.compile_mode(model, mode)

    def step() -> None:
        run(f)
        torch.cuda.synchronize()

    for _ in range(3):
        step()
    t0 = time.perf_counter()
    for _ in range(10):
        step()
    plain = (time.perf_counter() - t0) / 10
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(10):
        step()
    prof.disable()
    print(f"{case} {mode}: {plain * 1e3:.2f} ms per step (unprofiled)")
    stats = pstats.Stats(prof)
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
