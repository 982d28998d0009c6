"""How fast can a sum over dim 0 (a strided reduction: coil's "outer" tiling plus a split) go on
this GPU? A sweep of hand-written split reductions (Triton) beside coil's own partials kernel,
coil, Inductor, a copy and a plain read.

    python bench/sum_dim0_probe.py [--shapes 16384x8192,100352x256] [--dtypes bfloat16,float32]
                                   [--spread 0.25,0.5,1] [--rounds 5] [--top 4]
                                   [--timer cudagraph|do_bench]

The split: kernel 1 reduces S chunks of ceil(ROWS / S) rows each into fp32 partials [S, COLS]
(coil's "outer" tiling: a program owns XBLOCK neighbouring columns of one chunk and walks its rows
RBLOCK at a time into an [XBLOCK, RBLOCK] fp32 tile, reduced once after the loop), kernel 2 sums
the S partials of each column (a persistent kernel). Knobs of the sweep: S (`--spread`: multiples
of the S that the installed coil's split rule gives the shape) and XBLOCK, RBLOCK and warps
(TILES).

Per shape and dtype:
  - coil's own partials kernel for the shape (lowered and scheduled as coil does, generated for
    CUDA under the persistent and the outer strategy, each under its tuning candidates and
    EXTRA_TILES), alone, checked against float64 eager, timed;
  - phase 1: every hand-written point once (kernel 1 + kernel 2), checked against float64 eager
    (more than 1e-2 relative: reported and dropped); the best tile of each S printed;
  - the GPU kernels of coil's and Inductor's compiled sums and of the best two points, each with
    its time under torch.profiler (with the Python stacks of any copy coil makes);
  - phase 2: the `--top` fastest points, the best of each S, the best coil text of each strategy,
    coil's and Inductor's compiled sums, the copy and the plain read, in `--rounds` interleaved
    rounds: each one's median ms, its GB/s (the input's bytes / time) and its share of the
    copy's bandwidth (the copy's bytes read and written / its time, as `coil bench` counts it).

`--timer cudagraph` (default) times replays of a CUDA graph (no launch cost: the small shapes
are launch-bound under do_bench; an input that fits stays in L2) with coil's own CUDA graphs off;
`--timer do_bench` is `coil bench`'s method (launches from Python, L2 flushed before each call).
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
from collections.abc import Callable
from typing import Any

import torch
import triton
import triton.language as tl
import triton.testing
from sympy import prod as sympy_prod


@triton.jit
def _partials(x_ptr, p_ptr, ROWS: tl.constexpr, COLS: tl.constexpr, CHUNK: tl.constexpr, S: tl.constexpr,
              XBLOCK: tl.constexpr, RBLOCK: tl.constexpr):
    pid = tl.program_id(0)
    chunk = pid // (COLS // XBLOCK)
    col0 = (pid % (COLS // XBLOCK)) * XBLOCK
    cols = col0 + tl.arange(0, XBLOCK)[:, None]
    acc = tl.zeros([XBLOCK, RBLOCK], tl.float32)
    for r0 in range(0, CHUNK, RBLOCK):
        r = r0 + tl.arange(0, RBLOCK)[None, :]
        ptrs = x_ptr + (chunk * CHUNK + r) * COLS + cols
        if CHUNK % RBLOCK == 0 and ROWS % CHUNK == 0:
            v = tl.load(ptrs, eviction_policy="evict_first")
        else:
            v = tl.load(ptrs, (r < CHUNK) & (chunk * CHUNK + r < ROWS) & (cols >= 0), other=0,
                        eviction_policy="evict_first")
        acc += v.to(tl.float32)
    tl.store(p_ptr + chunk * COLS + cols, tl.sum(acc, 1)[:, None])


@triton.jit
def _combine(p_ptr, o_ptr, COLS: tl.constexpr, S: tl.constexpr, SP: tl.constexpr, XBLOCK: tl.constexpr):
    cols = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[:, None]
    s = tl.arange(0, SP)[None, :]
    v = tl.load(p_ptr + s * COLS + cols, (s < S) & (cols >= 0), other=0)
    tl.store(o_ptr + cols, tl.sum(v, 1)[:, None].to(o_ptr.dtype.element_ty))


@triton.jit
def _read(x_ptr, o_ptr, N: tl.constexpr, BLOCK: tl.constexpr):
    """A plain read: each program sums BLOCK contiguous elements (a bound on any reduction)."""
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x_ptr + i, eviction_policy="evict_first").to(tl.float32)
    tl.store(o_ptr + tl.program_id(0), tl.sum(v, 0))


Point = tuple[int, int, int, int]  # S, XBLOCK, RBLOCK, warps
TILES = ((64, 8, 4), (64, 16, 4), (64, 32, 4), (64, 64, 4), (64, 32, 8), (64, 64, 8), (128, 16, 4), (128, 32, 8))


def _split_fn(x: torch.Tensor, p: Point) -> Callable[[], torch.Tensor]:
    rows, cols = x.shape
    s, xb, rb, w = p
    part = torch.empty(s, cols, device=x.device, dtype=torch.float32)
    out = torch.empty(cols, device=x.device, dtype=x.dtype)
    grid1 = (s * cols // xb,)
    xb2 = max(1, min(32, 4096 // triton.next_power_of_2(s), cols))
    grid2 = (cols // xb2,)

    def run() -> torch.Tensor:
        _partials[grid1](x, part, rows, cols, -(-rows // s), s, xb, rb, num_warps=w, num_stages=1)
        _combine[grid2](part, out, cols, s, triton.next_power_of_2(s), xb2, num_warps=4, num_stages=1)
        return out

    return run


TIMER = "cudagraph"


def _median_ms(fn: Callable[[], object]) -> float:
    """fn's time: replays of a CUDA graph of fn (no launch cost; the input stays in L2 when it
    fits, as a reduction's input just written by the kernel before it does) or, with TIMER
    "do_bench", triton.testing.do_bench (launches from Python, L2 flushed before each call)."""
    if TIMER == "cudagraph":
        return float(triton.testing.do_bench_cudagraph(fn, rep=100, return_mode="median"))
    return float(triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median"))


def _lowered_sum(rows: int, cols: int, dtype: torch.dtype) -> Any:
    """coil's LoweredGraph of a sum over dim 0 of rows x cols (the installed coil, traced on the
    meta device)."""
    from coil import lowering_ir as L
    from torch.fx.experimental.proxy_tensor import make_fx

    def f(t: torch.Tensor) -> tuple[torch.Tensor]:
        return (t.sum(0),)

    x = torch.empty(rows, cols, device="meta", dtype=dtype)
    return L.lower(make_fx(f, decomposition_table=L.decomposition_table(), tracing_mode="fake")(x))


def _coil_default(rows: int, cols: int) -> int:
    """The chunks coil's split rule gives a sum over dim 0 of rows x cols (1 when it does not
    split)."""
    from coil import lowering_ir as L

    g = _lowered_sum(rows, cols, torch.bfloat16)
    first = next(op for op in g.operations if isinstance(op, L.Reduction))
    return max(1, int(sympy_prod(first.ranges)) // cols)


def _kernel_times(fn: Callable[[], object], calls: int = 20) -> str:
    """Each GPU kernel `fn` launches and its mean time (torch.profiler), as `name us; ...`."""
    from kernel_variants_probe import kernel_profile

    return "; ".join(f"{name[:40]} {us:.1f} us" for name, (_, us) in kernel_profile(fn, calls).items())


def _copy_stacks(fn: Callable[[], object]) -> str:
    """The Python stacks that launched copies during one call of fn (torch.profiler, with_stack)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], with_stack=True) as prof:
        fn()
        torch.cuda.synchronize()
    seen = []
    for e in prof.events():
        if e.name in ("aten::copy_", "aten::clone", "aten::contiguous") and e.stack:
            line = f"{e.name} <- " + " <- ".join(e.stack[:6])
            if line not in seen:
                seen.append(line)
    return "\n    ".join(seen) or "none"


EXTRA_TILES = {"persistent": ((32, 4), (64, 4), (64, 8), (128, 8), (256, 8)),
               "outer": ((64, 8, 4), (64, 16, 4), (64, 32, 4), (128, 16, 4), (128, 16, 8), (128, 32, 8))}


def _coil_kernels(rows: int, cols: int, dtype: torch.dtype) -> list[tuple[str, Any, int]]:
    """coil's own partials kernel (the first of its split) for this shape, generated under the
    persistent and the outer strategy, each under its tuning candidates and EXTRA_TILES:
    (tag, KernelSource, S)."""
    from coil.scheduler import KernelGroup, schedule
    from coil.triton_codegen import KernelConfig, generate, variants
    from coil.triton_codegen.variants import with_config

    sched = schedule(_lowered_sum(rows, cols, dtype))
    groups = [g for g in sched.steps if isinstance(g, KernelGroup)]
    bufs = sched.graph.buffers()
    out: list[tuple[str, Any, int]] = []
    for strategy in ("persistent", "outer"):
        ks = generate(groups[0], bufs, "cuda", strategy=strategy)
        xnumel, rnumel = (int(v) for v in ks.size_args[:2])
        s = xnumel // cols
        cfgs = [*variants(ks, "cuda")]
        for t in EXTRA_TILES[strategy]:
            xb, rb, w = (t[0], ks.constexprs["RBLOCK"], t[1]) if strategy == "persistent" else t
            cfgs.append(with_config(ks, KernelConfig(strategy, xb, rb, w)))
        seen = set()
        for v in cfgs:
            key = (v.constexprs["XBLOCK"], v.constexprs["RBLOCK"], v.num_warps)
            if key not in seen:
                seen.add(key)
                out.append((f"coil {strategy} S={s} r={rnumel} {key}", v, s))
    return out


def _coil_texts(x: torch.Tensor, ref: torch.Tensor) -> dict[str, Callable[[], object]]:
    """Launchers of `_coil_kernels` whose partials sum to `ref` (others reported), timed."""
    from kernel_variants_probe import _load

    rows, cols = x.shape
    fns: dict[str, Callable[[], object]] = {}
    for tag, ks, s in _coil_kernels(rows, cols, x.dtype):
        part = torch.empty(s, cols, device=x.device, dtype=torch.float32)
        try:
            kernel = _load(ks.source, "k")
            grid = (triton.cdiv(int(ks.size_args[0]), ks.constexprs["XBLOCK"]),)

            def launch(kernel: Any = kernel, grid: tuple[int] = grid, ks: Any = ks, part: torch.Tensor = part) -> None:
                kernel[grid](x, part, *(int(a) for a in ks.size_args), num_warps=ks.num_warps, **ks.constexprs)

            launch()
            err = float(((part.double().sum(0) - ref).abs() / (ref.abs() + 1.0)).max())
            if err > 1e-3:
                print(f"  {tag}: wrong (max rel err {err:.3g})", flush=True)
                continue
            fns[tag] = launch
        except Exception as exc:
            print(f"  {tag}: failed: {type(exc).__name__}: {str(exc)[:120]}", flush=True)
    return fns


def probe(rows: int, cols: int, dtype: torch.dtype, rounds: int, top: int, spread: tuple[float, ...]) -> None:
    from coil.backend.bench_rounds import interleaved

    x = torch.randn(rows, cols, device="cuda", dtype=dtype)
    ref = x.double().sum(0)
    nbytes = x.numel() * x.element_size()
    base = _coil_default(rows, cols)
    print(f"== {rows} x {cols} {str(dtype)[6:]}: coil's split rule gives S = {base} "
          f"({base * cols // 64} programs of 64 columns)", flush=True)
    points: list[Point] = []
    for f, (xb, rb, w) in itertools.product(spread, TILES):
        s = int(base * f) if f >= 1 else base // round(1 / f)
        if s >= 1 and cols % xb == 0 and rows // s >= rb:
            points.append((s, xb, rb, w))
    first: dict[Point, float] = {}
    for p in points:
        try:
            fn = _split_fn(x, p)
            got = fn().double()
            err = float(((got - ref).abs() / (ref.abs() + 1.0)).max())
            if err > 1e-2:
                print(f"  {p}: wrong (max rel err {err:.3g}), dropped", flush=True)
                continue
            first[p] = _median_ms(fn)
        except Exception as exc:  # a point that does not compile (registers) is reported and skipped
            print(f"  {p}: failed: {type(exc).__name__}: {str(exc)[:120]}", flush=True)
    ranked = sorted(first, key=first.__getitem__)
    extra: dict[str, Callable[[], object]] = {}
    texts = _coil_texts(x, ref)
    timed = sorted(((_median_ms(fn), tag) for tag, fn in texts.items()))
    print("coil's partials kernel (its text, its S), kernel alone: ms")
    for ms, tag in timed[:12]:
        print(f"  {tag:60s} {ms:.4f}", flush=True)
    for strategy in ("persistent", "outer"):
        default = next((t for t in texts if t.startswith(f"coil {strategy}")), None)
        if default is not None:
            print(f"  default {default:52s} {next(ms for ms, t in timed if t == default):.4f}")
        best = next((t for _, t in timed if t.startswith(f"coil {strategy}")), None)
        if best is not None:
            extra[f"{best} (alone)"] = texts[best]
    best_per_s: dict[int, Point] = {}
    for p in ranked:
        best_per_s.setdefault(p[0], p)
    print("phase 1, best tile per S (S, XBLOCK, RBLOCK, warps): ms")
    for s_, p in sorted(best_per_s.items()):
        print(f"  S={s_:5d} ({s_ * cols // p[1]:6d} programs) {p}  {first[p]:.4f}", flush=True)
    fns: dict[str, Callable[[], object]] = {}
    chosen = list(dict.fromkeys([*ranked[:top], *best_per_s.values()]))
    for p in chosen:
        fns[str(p)] = _split_fn(x, p)
    fns.update(extra)
    y = torch.empty_like(x)
    fns["copy"] = lambda: y.copy_(x)
    if x.numel() % 8192 == 0:
        red = torch.empty(x.numel() // 8192, device="cuda", dtype=torch.float32)
        fns["read"] = lambda: _read[(x.numel() // 8192,)](x, red, x.numel(), 8192, num_warps=8)
    for mode in ("inductor", "coil"):
        torch._dynamo.reset()
        g = torch.compile(lambda t: t.sum(0)) if mode == "inductor" else torch.compile(lambda t: t.sum(0), backend="coil")
        g(x)
        fns[mode] = (lambda g=g: g(x))
        kernels = _kernel_times(fns[mode])
        print(f"  {mode} kernels: {kernels}", flush=True)
        if "Memcpy" in kernels:
            print(f"  {mode} copies:\n    {_copy_stacks(fns[mode])}", flush=True)
    for p in chosen[:2]:
        print(f"  {p} kernels: {_kernel_times(fns[str(p)])}", flush=True)
    times = interleaved(fns, rounds, _median_ms)
    copy = statistics.median(times["copy"])
    copy_gbs = 2 * nbytes / copy / 1e6
    print(f"phase 2 ({rounds} rounds; copy {copy_gbs:.0f} GB/s): median ms, GB/s, % of copy")
    for k, ts in sorted(times.items(), key=lambda kv: statistics.median(kv[1])):
        ms = statistics.median(ts)
        gbs = (2 if k == "copy" else 1) * nbytes / ms / 1e6
        print(f"  {k:40s} {ms:.4f}  {gbs:6.0f}  {100 * gbs / copy_gbs:5.1f} %  [{' '.join(f'{t:.4f}' for t in ts)}]",
              flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="16384x8192", help="ROWSxCOLS[,ROWSxCOLS...]: sum over ROWS")
    ap.add_argument("--dtypes", default="bfloat16")
    ap.add_argument("--spread", default="0.25,0.5,1,2,4", help="S as multiples of coil's rule's S")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--top", type=int, default=4)
    ap.add_argument("--timer", choices=("cudagraph", "do_bench"), default="cudagraph")
    args = ap.parse_args()
    global TIMER
    TIMER = args.timer
    if TIMER == "cudagraph":  # coil's own CUDA graphs cannot run inside the timer's capture
        os.environ["COIL_CUDA_GRAPHS"] = "0"
    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, flush=True)
    spread = tuple(float(f) for f in args.spread.split(","))
    for shape in args.shapes.split(","):
        rows, cols = (int(v) for v in shape.split("x"))
        for dt in args.dtypes.split(","):
            probe(rows, cols, getattr(torch, dt), args.rounds, args.top, spread)


if __name__ == "__main__":
    main()
