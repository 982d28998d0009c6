"""What separates coil's big micro-case kernels from Inductor's: variants of coil's own kernel,
timed in interleaved rounds beside Inductor and coil (CUDA).

    python bench/kernel_variants_probe.py [CASE ...] [--rounds N]

CASE is a pointwise or row-norm micro case of `coil bench` (default: pointwise_chain_bf16,
pointwise_chain_fp32, bias_gelu_bf16, bias_gelu_fp32, layernorm_bf16). For each: the case
compiled by Inductor (`torch.compile`) and by coil (with COIL_DEBUG_DIR, to read back the one
Triton kernel coil generated for the GPU), then that kernel's source launched directly by Triton
as it is (`coil_text`, at coil's default configuration: 1024-wide blocks with 2 warps for a
pointwise kernel, one 8192-wide row with 16 warps for a persistent one) and changed one way at a
time. Pointwise kernels:

- `no_mask`: loads and stores without the `xmask` predicate (the size is a multiple of the block,
  as Inductor proves and coil does not);
- `warps4`: 4 warps instead of coil's 2 (Inductor's choice for 1024-wide blocks);
- `no_mask_warps4`: both;
- `no_zero_bcast`: the store's value without coil's `- xindex * 0` broadcast;
- `x512_w8`, `x512_w4`, `x2048_w8`, `x256_w4`: coil's text with other block sizes and warps;
- `evict_first_warps4`, `store_cs_warps4`, `streaming_warps4` (session 30): 1024 / 4 with every
  load `evict_first`, the store `.cs` (cache-streaming), or both.

Persistent (row) kernels:

- `no_mask`: no `xmask & rmask` on loads, stores and the reductions' `tl.where`;
- `reload`: the normalisation reads the row again (evict_first; the first read evict_last)
  instead of keeping the centred row in registers across the variance's reduction, as
  Inductor's two-loop layer norm does;
- `reload_no_mask`: both; `warps8`: 8 warps.

Also timed: `inductor_text`, Inductor's own kernel (its source and the configuration its runtime
kept) launched the same direct way, and for pointwise kernels `loads_first` (every load issued
before the arithmetic, as Inductor orders them) and `loads_first_warps4`.

Every variant's output is checked equal to coil's compiled output (bitwise, or else within 1e-5
relative, reported: another warp count reorders an fp32 reduction; `inductor_text` within 1e-6
relative, its math differs) before timing. Times are `triton.testing.do_bench`
medians in `--rounds` interleaved rounds (coil.backend.bench_rounds); printed per variant: the
median ms, and the median over rounds of its time / `coil_text`'s time. Then, under
`torch.profiler`, the GPU kernels each of `inductor`, `coil` (the compiled functions) and
`coil_text` runs per call and their device time: whether a gap between a compiled function and
its kernel is the kernel's or the call's.
"""

from __future__ import annotations

import argparse
import atexit
import importlib.util
import os
import re
import shutil
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import triton
from micro_probe import _inductor_kernels, micro_case  # beside this script

DEFAULT = ("pointwise_chain_bf16", "pointwise_chain_fp32", "bias_gelu_bf16", "bias_gelu_fp32", "layernorm_bf16")


def _coil_kernel(fn: Callable[..., Any], args: tuple[torch.Tensor, ...]) -> tuple[str, torch.Tensor]:
    """coil's compiled output of fn(*args) and the source of the one kernel it generated."""
    import coil.backend

    debug = tempfile.mkdtemp(prefix="pv-debug-")
    os.environ["COIL_DEBUG_DIR"] = debug
    try:
        torch._dynamo.reset()
        coil.backend.reset()
        with torch.no_grad():
            out = torch.compile(fn, backend="coil")(*args)
        torch.cuda.synchronize()
    finally:
        del os.environ["COIL_DEBUG_DIR"]
    kernels = sorted(Path(debug).glob("*/kernels/*.py"))
    if len(kernels) != 1:
        raise RuntimeError(f"expected one coil kernel, found {[str(k) for k in kernels]}")
    return kernels[0].read_text(), out


def _variants(src: str) -> dict[str, tuple[str, int]]:
    """name -> (kernel source, warps)."""
    if "RBLOCK" not in src:  # pointwise
        no_mask = re.sub(r", xmask, other=0\)", ")", src)
        no_mask = re.sub(r", xmask\)", ")", no_mask)
        first = _loads_first(src)
        return {"coil_text": (src, 2), "no_mask": (no_mask, 2), "warps4": (src, 4), "no_mask_warps4": (no_mask, 4),
                "no_zero_bcast": (src.replace(" - xindex * 0", ""), 2), "loads_first": (first, 2),
                "loads_first_warps4": (first, 4), "evict_first_warps4": (_streaming(src, loads=True), 4),
                "store_cs_warps4": (_streaming(src, store=True), 4),
                "streaming_warps4": (_streaming(src, loads=True, store=True), 4)}
    no_mask = strip_row_masks(src)
    return {"coil_text": (src, 16), "no_mask": (no_mask, 16), "reload": (_reload(src), 16),
            "reload_no_mask": (_reload(no_mask), 16), "warps8": (src, 8)}


def strip_row_masks(src: str) -> str:
    """A reduction kernel's text without `xmask & rmask`: unpredicated loads and stores, and each
    `tl.where(xmask & rmask, a, b)` replaced by `a` (b is the identity or the old accumulator)."""
    out = src.replace(", xmask & rmask, other=0", "").replace(", xmask & rmask)", ")")
    return re.sub(r"tl\.where\(xmask & rmask, ([^,]+), ([^)]+)\)", r"\1", out)


def _streaming(src: str, loads: bool = False, store: bool = False) -> str:
    """A pointwise kernel whose loads stream through L2 (`evict_first`) and/or whose store is
    `.cs` (cache-streaming): the operands are read and written once, each bigger than L2."""
    call = r"(tl\.{}\((?:[^()]|\([^()]*\))*)\)"  # the call's arguments, one level of parentheses inside
    if loads:
        src = re.sub(call.format("load"), r"\1, eviction_policy='evict_first')", src)
    if store:
        src = re.sub(call.format("store"), r"\1, cache_modifier='.cs')", src)
    return src


def _loads_first(src: str) -> str:
    """A pointwise kernel with its `tmpN = tl.load(...)` lines moved, in their order, to just
    before the first other `tmp` line (their addresses depend on the index lines only)."""
    lines = src.split("\n")
    loads = [ln for ln in lines if re.match(r"    tmp\d+ = tl\.load\(", ln)]
    rest = [ln for ln in lines if ln not in loads]
    at = next(i for i, ln in enumerate(rest) if ln.startswith("    tmp"))
    return "\n".join(rest[:at] + loads + rest[at:])


def _inductor_kernel(before: set[int]) -> tuple[str, dict[str, int], int] | None:
    """The one Inductor kernel not in `before` (ids): a runnable module source, its kept block
    sizes and warps; None unless there is exactly one such kernel with one launcher."""
    found = [k for k in _inductor_kernels() if id(k) not in before and getattr(k, "launchers", None)]
    if len(found) != 1 or len(found[0].launchers) != 1:
        return None
    k = found[0]
    cfg = k.launchers[0].config
    head = ("import triton\nimport triton.language as tl\n"
            "from torch._inductor.runtime import triton_helpers\n"
            "from torch._inductor.runtime.triton_helpers import libdevice, math as tl_math\n\n@triton.jit\n")
    return head + str(k.fn.src), dict(cfg.kwargs), int(cfg.num_warps)


def _reload(src: str) -> str:
    """The persistent norm kernel with its normalisation reading the row again (see the module
    docstring); unchanged when its shape is not the one expected (first load `tmp1` of ptr0,
    centred row `tmp7 = (tmp2 - tmp6)` scaled by `tmp15 = (tmp7 * tmp14)`)."""
    head = "    tmp1 = tl.load(ptr0 + "
    if head not in src or "tmp7 = (tmp2 - tmp6)" not in src or "    tmp15 = (tmp7 * tmp14)\n" not in src:
        return src
    start = src.index(head) + len("    tmp1 = ")
    depth, end = 0, start
    for end in range(start, len(src)):  # the load call's closing parenthesis
        depth += {"(": 1, ")": -1}.get(src[end], 0)
        if depth == 0 and src[end] == ")":
            break
    call = src[start:end]  # "tl.load(ptr0 + ..." without its ")"
    out = src[:end] + ", eviction_policy='evict_last'" + src[end:]
    again = (f"    tmp1r = {call}, eviction_policy='evict_first').to(tl.float32)\n"
             "    tmp15 = ((tmp1r - tmp6) * tmp14)\n")
    return out.replace("    tmp15 = (tmp7 * tmp14)\n", again, 1)


def compiled_pair(fn: Callable[..., Any], args: tuple[torch.Tensor, ...]
                  ) -> tuple[set[int], Callable[..., Any], Callable[..., Any], torch.Tensor]:
    """fn compiled by Inductor and by coil, each called once under no_grad: the ids of
    Inductor's kernels from before, both compiled functions and coil's output."""
    torch._dynamo.reset()
    before = {id(k) for k in _inductor_kernels()}
    ind = torch.compile(fn)
    coil_fn = torch.compile(fn, backend="coil")
    with torch.no_grad():
        ind(*args)
        out = coil_fn(*args)
    torch.cuda.synchronize()
    return before, ind, coil_fn, out


def _launcher(kernel: Any, args: tuple[torch.Tensor, ...], out: torch.Tensor, sizes: list[int], warps: int,
              consts: dict[str, int]) -> Callable[[], None]:
    """A call launching `kernel` over `args`, `out` and the size arguments, one program per
    XBLOCK of sizes[0]."""
    grid = (triton.cdiv(sizes[0], consts.get("XBLOCK", 1)),)

    def launch() -> None:
        kernel[grid](*args, out, *sizes, num_warps=warps, **consts)

    return launch


def _launches(launch: Callable[[], None], tag: str) -> bool:
    """Whether `launch` compiles and runs; a variant that does not is reported, not fatal."""
    try:
        launch()
        torch.cuda.synchronize()
    except Exception as exc:
        print(f"  {tag}: {type(exc).__name__}: {str(exc)[:300]}")
        return False
    return True


def _load(src: str, tag: str) -> Any:
    folder = tempfile.mkdtemp(prefix="pv-src-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    path = Path(folder) / f"pv_{tag}.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    name = re.findall(r"^def (\w+)\(", src, re.M)[-1]  # the kernel follows any helpers
    return getattr(mod, name)


def probe(case: str, rounds: int) -> None:
    micro, _, args = micro_case(case)
    src, want = _coil_kernel(micro.fn, args)
    before, ind, coil_fn, _ = compiled_pair(micro.fn, args)
    n = want.numel()
    calls: dict[str, Callable[[], object]] = {"inductor": lambda: ind(*args), "coil": lambda: coil_fn(*args)}
    reduction = want.dim() == 2 and "RBLOCK" in src
    entries = [(tag, text, warps, {"XBLOCK": 1, "RBLOCK": want.shape[1]} if reduction else {"XBLOCK": 1024}, True)
               for tag, (text, warps) in _variants(src).items()]
    if not reduction:  # other block sizes of coil's own text (Inductor's 512 / 8 for the pointwise chain)
        entries += [(f"x{x}_w{w}", src, w, {"XBLOCK": x}, True) for x, w in ((512, 8), (512, 4), (2048, 8), (256, 4))]
    ind_kernel = _inductor_kernel(before)
    if ind_kernel is None:
        print("  inductor_text: not one kernel with one launcher, skipped")
    else:
        entries.append(("inductor_text", ind_kernel[0], ind_kernel[2], ind_kernel[1], False))
    base_text = entries[0][1:3]
    for tag, text, warps, consts, exact in entries:
        if tag != "coil_text" and (text, warps) == base_text:
            print(f"  {tag}: same kernel as coil_text (its shape was not recognised), skipped")
            continue
        out = torch.empty_like(want)
        launch = _launcher(_load(text, tag), args, out, list(want.shape) if reduction else [n], warps, consts)
        if not _launches(launch, tag):
            continue
        if exact and not torch.equal(out, want):
            # another warp count reorders an fp32 reduction's sum: close, not bitwise (session 28)
            diff = (out.float() - want.float()).abs().max().item()
            close = torch.allclose(out.float(), want.float(), rtol=1e-5, atol=1e-6)
            print(f"  {tag}: not bitwise equal to coil's compiled output (max abs diff {diff:.3g})"
                  + ("; within 1e-5 relative, timed" if close else "; not timed"))
            if not close:
                continue
        elif not exact and not torch.allclose(out.float(), want.float(), rtol=1e-6, atol=1e-6):
            print(f"  {tag}: output differs from coil's compiled output; not timed")
            continue
        calls[tag] = launch
    time_rounds(case, calls, rounds, "coil_text")
    with torch.no_grad():
        for tag in ("inductor", "coil", "coil_text"):
            per_call, names = _kernel_time(calls[tag])
            print(f"  profiler {tag:10s} {per_call:8.2f} us of GPU kernels a call: "
                  + ", ".join(f"{k[:50]} x{v:g}" for k, v in names.items()))


def time_rounds(case: str, calls: dict[str, Callable[[], object]], rounds: int, ref: str,
                by_time: bool = False) -> None:
    """Time `calls` in `rounds` interleaved rounds (do_bench medians) and print, per call, the
    median ms and the median over rounds of its time / `ref`'s (sorted by time if `by_time`)."""
    from coil.backend.bench_rounds import interleaved

    with torch.no_grad():
        times = interleaved(calls, rounds, lambda c: float(triton.testing.do_bench(c, warmup=25, rep=100,
                                                                                     return_mode="median")))
    print(f"\n== {case} ({torch.cuda.get_device_name()}, torch {torch.__version__}, Triton {triton.__version__}), "
          f"{rounds} rounds")
    rows = sorted(times.items(), key=lambda kv: statistics.median(kv[1])) if by_time else list(times.items())
    for tag, ms in rows:
        ratio = statistics.median(a / b for a, b in zip(ms, times[ref], strict=True))
        print(f"  {tag:22s} {statistics.median(ms):.4f} ms  / {ref} {ratio:.4f}  rounds {' '.join(f'{x:.4f}' for x in ms)}")


def kernel_profile(call: Callable[[], object], n: int = 20) -> dict[str, tuple[float, float]]:
    """Each GPU kernel (or copy) `call` runs: (launches per call, device microseconds per call),
    over n calls under torch.profiler after one call outside it."""
    from torch.profiler import ProfilerActivity, profile

    call()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            call()
        torch.cuda.synchronize()
    out: dict[str, tuple[float, float]] = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            launches, us = out.get(e.name, (0.0, 0.0))
            out[e.name] = (launches + 1 / n, us + (getattr(e, "device_time", None) or getattr(e, "cuda_time", 0.0)) / n)
    return out


def _kernel_time(call: Callable[[], object], n: int = 20) -> tuple[float, dict[str, float]]:
    """Device microseconds of GPU kernels per call, and each kernel's launches per call, over n
    calls under torch.profiler."""
    prof = kernel_profile(call, n)
    return sum(us for _, us in prof.values()), {k: launches for k, (launches, _) in prof.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cases", nargs="*", default=list(DEFAULT))
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args(argv)
    for case in a.cases:
        probe(case, a.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
