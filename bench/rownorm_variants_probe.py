"""Variants of coil's row-norm kernels (layer norm, RMSNorm) from coil's own code generator, timed
beside Inductor's kernel in interleaved rounds (CUDA).

    python bench/rownorm_variants_probe.py [CASE ...] [--rounds N] [--show]

CASE is a row-norm micro case of `coil bench` (default: layernorm_fp32 rmsnorm_fp32). Unlike
bench/kernel_variants_probe.py, which edits the one kernel coil kept, this generates the case's
kernel group with `coil.triton_codegen.generate` for the GPU in each of its texts: `persistent`
(the row held in registers), `reread` (the row read again after the reductions, evict_first;
`generate(..., reread=True)`) and `looped` (a loop over the row per dependent reduction), then
changes each one way at a time:

- `_w32`: 32 warps instead of 16 (8 fp32 elements a thread per 8192-wide load);
- `_nomask`: no `xmask & rmask` on loads, stores and the reductions' `tl.where` (the sizes are
  multiples of the blocks, as Inductor proves);
- `_baked`: `xnumel` and `rnumel` assigned their values in the body (Inductor writes static
  sizes into the kernel; Triton then sees the trip counts and folds the masks it can);
- `_nobcast`: the store's value without coil's `- rindex * 0 + xindex * 0` broadcast;
- `_plain`: `_nomask` and `_nobcast` together;
- `_rcp` (loops only, in place of `_baked` since session 30): the online variance's division of
  each element's step by its lane's count replaced by a product with one reciprocal per step.

Loops are launched with one row per program at RBLOCK 8192 and 4096 (Inductor's kept blocks on
the H200 in session 28), 16 warps. Also timed: `inductor_text` (Inductor's own kernel and kept
configuration, launched the same direct way), and the compiled functions `inductor` and `coil`.

Every variant's output must be within 1e-5 relative of coil's compiled output (`inductor_text`
within 1e-5 too: its reduction order differs) or it is reported and not timed. Times are
`triton.testing.do_bench` medians in `--rounds` interleaved rounds (coil.backend.bench_rounds);
printed per variant: the median ms and the median over rounds of its time / `inductor_text`'s.
`--show` prints each base text and Inductor's kernel.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable
from typing import Any

import torch
from kernel_variants_probe import (  # beside this script
    _inductor_kernel,
    _launcher,
    _launches,
    _load,
    strip_row_masks,
)
from micro_probe import micro_case

DEFAULT = ("layernorm_fp32", "rmsnorm_fp32")


def _texts(fn: Callable[..., Any], args: tuple[torch.Tensor, ...]) -> dict[str, str]:
    """coil's generated texts for fn's one kernel group on the GPU: persistent, reread, looped."""
    from coil import lowering_ir as L
    from coil.scheduler import KernelGroup, schedule
    from coil.triton_codegen import generate
    from torch.fx.experimental.proxy_tensor import make_fx

    os.environ.setdefault("COIL_SPLIT_REDUCTION_MIN", str(1 << 40))  # rows as the micro case has them

    def tupled(*a: torch.Tensor) -> tuple[torch.Tensor]:
        return (fn(*a),)

    gm = make_fx(tupled, decomposition_table=L.decomposition_table(), tracing_mode="fake")(*args)
    s = schedule(L.lower(gm))
    groups = [g for g in s.steps if isinstance(g, KernelGroup)]
    if len(groups) != 1:
        raise RuntimeError(f"expected one kernel group, found {len(groups)}")
    bufs = s.graph.buffers()
    return {tag: generate(groups[0], bufs, "cuda", **kw).source
            for tag, kw in (("persistent", {}), ("reread", {"reread": True}), ("looped", {"strategy": "looped"}))}


def _baked(src: str, sizes: list[int]) -> str:
    head = re.search(r"^def \w+\(.*\):\n", src, re.M)
    assert head is not None
    consts = f"    xnumel = {sizes[0]}\n    rnumel = {sizes[1]}\n"
    return src[:head.end()] + consts + src[head.end():]


def _reciprocal(src: str) -> str:
    """The online variance's per-element division by the lane's count replaced by a product with
    the iteration's reciprocal, one scalar (right when every lane takes every iteration: the sizes
    are multiples of the blocks)."""
    return re.sub(r"(acc_\w+_mean) \+ (tmp\d+) / (tmp\d+)", r"\1 + \2 * (1.0 / (roffset // RBLOCK + 1))", src)


def _nobcast(src: str) -> str:
    return src.replace(" - rindex * 0 + xindex * 0", "")


def probe(case: str, rounds: int, show: bool) -> None:
    from kernel_variants_probe import _kernel_time, compiled_pair, time_rounds

    micro, _, args = micro_case(case)
    texts = _texts(micro.fn, args)
    before, ind, coil_fn, want = compiled_pair(micro.fn, args)
    sizes = list(want.shape)
    calls: dict[str, Callable[[], object]] = {"inductor": lambda: ind(*args), "coil": lambda: coil_fn(*args)}
    entries: list[tuple[str, str, int, dict[str, int]]] = []
    row = {"XBLOCK": 1, "RBLOCK": sizes[1]}
    for base in ("persistent", "reread"):
        src = texts[base]
        for tag, text in (("", src), ("_nomask", strip_row_masks(src)), ("_baked", _baked(src, sizes)),
                          ("_nobcast", _nobcast(src)), ("_plain", strip_row_masks(_nobcast(src)))):
            entries.append((f"{base}{tag}", text, 16, row))
            entries.append((f"{base}{tag}_w32", text, 32, row))
    loop = texts["looped"]
    for r in (8192, 4096):
        for tag, text in (("", loop), ("_nomask", strip_row_masks(loop)), ("_rcp", _reciprocal(loop))):
            entries.append((f"looped{r}{tag}", text, 16, {"XBLOCK": 1, "RBLOCK": r}))
    ind_kernel = _inductor_kernel(before)
    if ind_kernel is None:
        print("  inductor_text: not one kernel with one launcher, skipped")
    else:
        entries.append(("inductor_text", ind_kernel[0], ind_kernel[2], ind_kernel[1]))
    if show:
        for base, src in texts.items():
            print(f"---- coil {base}\n{src}")
        if ind_kernel is not None:
            print(f"---- inductor {ind_kernel[1]} warps {ind_kernel[2]}\n{ind_kernel[0]}")
    for tag, text, warps, consts in entries:
        out = torch.empty_like(want)
        launch = _launcher(_load(text, tag), args, out, sizes, warps, consts)
        if not _launches(launch, tag):
            continue
        if not torch.allclose(out.float(), want.float(), rtol=1e-5, atol=1e-5):
            diff = (out.float() - want.float()).abs().max().item()
            print(f"  {tag}: differs from coil's compiled output (max abs diff {diff:.3g}); not timed")
            continue
        calls[tag] = launch
    time_rounds(case, calls, rounds, "inductor_text" if "inductor_text" in calls else "inductor", by_time=True)
    with torch.no_grad():
        for tag in ("inductor", "coil"):
            per_call, names = _kernel_time(calls[tag])
            print(f"  profiler {tag:10s} {per_call:8.2f} us of GPU kernels a call: "
                  + ", ".join(f"{k[:50]} x{v:g}" for k, v in names.items()))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cases", nargs="*", default=list(DEFAULT))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--show", action="store_true", help="print the base texts and Inductor's kernel")
    a = ap.parse_args(argv)
    for case in a.cases:
        probe(case, a.rounds, a.show)
    return 0


if __name__ == "__main__":
    sys.exit(main())
