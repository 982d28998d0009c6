"""Time reductions with few outputs or strided rows: eager, Inductor, coil, side by side.

    python bench/reduce_probe.py [--cases sum,var_mean] [--sweep] [coil|inductor|eager ...]

Cases (H200-sized):
  sum      sum over dim 0 and dim 1 of a 16384 x 8192 tensor, bf16 and fp32 (dim 0 is the
           strided reduction: coil's "outer" tiling plus a split);
  var_mean torch.var_mean over (0, 2, 3) of a [32, 256, 56, 56] bf16 tensor, NCHW and
           channels_last (batch-norm statistics: 256 outputs, 100 352-long strided rows).
Each line: ms (median of triton.testing.do_bench), GB/s (bytes of the input read once / time),
max error against float64 eager.

--sweep: for coil only, also time the strided cases under each (OUTER_RBLOCK, OUTER_WARPS) of a
small grid by patching coil.triton_codegen.config (this coil version's tiling constants; the
graph cache is bypassed so every point recompiles). OUTER_XBLOCK stays at 64: lowering-ir's split
rule assumes it (SPLIT_OUTER_ROWS).

COIL_LOGS=kernels prints coil's kernels (COIL_LOGS=kernels,wrapper adds the launches: grid and
block sizes). Self-contained (does not use coil's bench module), so it runs against any coil
version: used to bisect a regression by installing two builds side by side.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable, Iterator

import torch
import triton.testing

Fn = Callable[[torch.Tensor], object]


def _leaves(out: object) -> list[torch.Tensor]:
    return list(out) if isinstance(out, tuple | list) else [out]  # type: ignore[list-item]


def _compiled(fn: Fn, mode: str) -> Fn:
    torch._dynamo.reset()
    if mode == "eager":
        return fn
    if mode == "inductor":
        return torch.compile(fn)
    return torch.compile(fn, backend="coil")


def _time(label: str, fn: Fn, x: torch.Tensor, mode: str) -> None:
    ref = [r.double() for r in _leaves(fn(x.double()))]
    g = _compiled(fn, mode)
    out = _leaves(g(x))
    err = max(float((o.double() - r).abs().max()) for o, r in zip(out, ref, strict=True))
    ms = triton.testing.do_bench(lambda: g(x), warmup=50, rep=300)
    gbs = x.numel() * x.element_size() / ms / 1e6
    print(f"{label:34s} {mode:8s} {ms:8.4f} ms {gbs:7.0f} GB/s  max err {err:.3g}", flush=True)


def _sum_cases() -> Iterator[tuple[str, Fn, torch.Tensor]]:
    for dtype in (torch.bfloat16, torch.float32):
        x = torch.randn(16384, 8192, device="cuda", dtype=dtype)
        for dim in (0, 1):
            def f(t: torch.Tensor, d: int = dim) -> torch.Tensor:
                return t.sum(d)

            yield f"sum dim{dim} {str(dtype)[6:]}", f, x


def _var_mean_cases() -> Iterator[tuple[str, Fn, torch.Tensor]]:
    x = torch.randn(32, 256, 56, 56, device="cuda", dtype=torch.bfloat16)

    def f(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.var_mean(t, (0, 2, 3))

    yield "var_mean(0,2,3) bf16 NCHW", f, x
    yield "var_mean(0,2,3) bf16 channels_last", f, x.to(memory_format=torch.channels_last)


CASES = {"sum": _sum_cases, "var_mean": _var_mean_cases}
STRIDED = ("sum dim0", "channels_last")  # the cases the outer tiling handles


@contextlib.contextmanager
def _tiling(rblock: int, warps: int) -> Iterator[None]:
    from coil.backend import knobs
    from coil.triton_codegen import config

    old = config.OUTER_RBLOCK, config.OUTER_WARPS
    config.OUTER_RBLOCK, config.OUTER_WARPS = rblock, warps
    try:
        with knobs.override(graph_cache=False):
            yield
    finally:
        config.OUTER_RBLOCK, config.OUTER_WARPS = old


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("modes", nargs="*", default=["eager", "inductor", "coil"])
    ap.add_argument("--cases", default="sum,var_mean")
    ap.add_argument("--sweep", action="store_true")
    args = ap.parse_args()
    for name in args.cases.split(","):
        for label, fn, x in CASES[name]():
            for mode in args.modes:
                _time(label, fn, x, mode)
            if args.sweep and "coil" in args.modes and any(s in label for s in STRIDED):
                for rblock in (8, 16, 32, 64):
                    for warps in (4, 8):
                        with _tiling(rblock, warps):
                            _time(f"{label} R{rblock}w{warps}", fn, x, "coil")


if __name__ == "__main__":
    main()
