"""Launch overhead of coil.runtime on a GPU: Kernel slow path vs fast path vs raw `fn[grid]`, and a
CUDA-graph replay of a 200-launch chain vs launching it eagerly.

Run on the device machine (see packages/runtime/README.md, "Measuring launch overhead"):

    python3 packages/runtime/benchmarks/launch_overhead.py [--launches 10000] [--json out.json]

(a) A one-block Triton kernel (4 pointer/int args, as small as coil's pointwise kernels get) is
    launched N times back to back; the wall time of the loop, synchronised at the end, divided by N
    is the per-launch cost (the GPU work is ~2 us, so a launcher faster than that is GPU-bound: see
    the `empty loop` and CUDA-graph lines for the floor).
(b) 200 launches of the same kernel (a dependent chain over 3 buffers) run eagerly through the fast
    path, through the slow path, and as one CUDA-graph replay (`CudaGraphRunner`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import triton
from coil.knobs import knobs
from coil.runtime import CudaGraphRunner, KernelSpec, ReplayPolicy, TensorArg, compile_kernels
from coil.runtime.compile import clear_memo

SOURCE = '''\
import triton
import triton.language as tl


@triton.jit
def tiny_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask),
             mask=mask)
'''
N = 1024
BLOCK = 1024


def spec() -> KernelSpec:
    f32 = TensorArg(torch.float32)
    return KernelSpec("tiny_add", SOURCE, (f32, f32, f32, N), {"BLOCK": BLOCK})


def timed(fn: Any, repeats: int = 5) -> float:
    """Median seconds of `fn()` (synchronised before and after)."""
    samples = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--launches", type=int, default=10_000)
    parser.add_argument("--chain", type=int, default=200)
    parser.add_argument("--json", type=Path)
    opts = parser.parse_args()
    n_launch = opts.launches
    device = torch.device("cuda")
    cache = Path(tempfile.mkdtemp(prefix="coil-bench-"))
    with knobs.override(cache_dir=cache, fast_launch=True):
        fast = compile_kernels([spec()], device)["tiny_add"]
    clear_memo()
    with knobs.override(cache_dir=cache, fast_launch=False):
        slow = compile_kernels([spec()], device)["tiny_add"]
    x, y, out = (torch.randn(N, device=device) for _ in range(3))
    grid = (1,)
    fn = fast.fn
    for k in (fast, slow):
        k(grid, x, y, out, N)
    assert fast.fast and not slow.fast

    def loop_kernel(k: Any) -> Any:
        def go() -> None:
            for _ in range(n_launch):
                k(grid, x, y, out, N)
        return go

    def loop_raw() -> None:
        launcher = fn[grid]
        for _ in range(n_launch):
            launcher(x, y, out, N, BLOCK=BLOCK)

    def loop_empty() -> None:
        for _ in range(n_launch):
            pass

    def loop_torch() -> None:
        for _ in range(n_launch):
            torch.add(x, y, out=out)

    results: dict[str, Any] = {
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "launches": n_launch,
    }
    per_launch = {}
    for name, go in [("Kernel slow path (JITFunction.run)", loop_kernel(slow)),
                     ("Kernel fast path", loop_kernel(fast)),
                     ("raw fn[grid](...)", loop_raw),
                     ("torch.add(out=) (ATen, reference)", loop_torch),
                     ("empty loop", loop_empty)]:
        go()  # warm
        per_launch[name] = timed(go) / n_launch * 1e6
    results["us_per_launch"] = per_launch
    print(f"GPU {results['gpu']}, torch {results['torch']}, triton {results['triton']}")
    print(f"(a) {n_launch} launches of a 1-block kernel, wall time per launch:")
    for name, us in per_launch.items():
        print(f"    {name:40s} {us:7.2f} us")

    # (b) a chain of 200 dependent launches: eager fast / eager slow / CUDA-graph replay
    chain = opts.chain

    def chain_call(k: Any) -> Any:
        def call(args: list[Any]) -> tuple[Any, ...]:
            a, b = args
            args.clear()
            bufs = [a, b, torch.empty_like(a)]
            for i in range(chain):
                k(grid, bufs[i % 3], bufs[(i + 1) % 3], bufs[(i + 2) % 3], N)
            return (bufs[(chain + 1) % 3],)
        return call

    a, b = torch.randn(N, device=device), torch.randn(N, device=device)
    runner = CudaGraphRunner(chain_call(fast), [a, b])
    runner_nc = CudaGraphRunner(chain_call(fast), [a, b], policy=ReplayPolicy(clone_outputs=False))
    ref = chain_call(slow)([a, b])[0]
    got = runner([a, b])[0]
    assert torch.equal(ref, got), "graph replay differs from eager"
    assert torch.equal(chain_call(fast)([a, b])[0], ref)
    reps = 50
    chain_ms = {}
    for name, go in [
        ("eager, slow path", lambda: chain_call(slow)([a, b])),
        ("eager, fast path", lambda: chain_call(fast)([a, b])),
        ("CudaGraphRunner replay (clone outputs)", lambda: runner([a, b])),
        ("CudaGraphRunner replay (no clone)", lambda: runner_nc([a, b])),
    ]:
        go()

        def many(go: Any = go) -> None:
            for _ in range(reps):
                go()

        chain_ms[name] = timed(many) / reps * 1e3
    results["chain"] = chain
    results["chain_ms"] = chain_ms
    print(f"(b) a chain of {chain} launches, per chain:")
    for name, ms in chain_ms.items():
        print(f"    {name:40s} {ms:8.3f} ms  ({ms * 1e3 / chain:6.2f} us per kernel)")
    if opts.json:
        opts.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
