"""Autotuning: the fastest of a kernel's launch configurations, chosen once at compile time, cached.

`tune(problems, device)` takes one `TuningProblem` per kernel: its candidate launches (the same
kernel under other constexprs, warps and grid; the default first), how many elements each of its
pointer arguments has, which of them it writes, and its reduction length. For each problem:

1. **Cache.** The key (`problem_key`: sha256 of every candidate's `KernelSpec.code_key` (its
   source without comment lines and with the kernel's own name replaced, arguments and size
   values, constexprs, warps, stages) and grid, of the buffer sizes, and of the Triton and torch
   versions and the device's name and compute capability) is looked up in an in-process
   memo, then on disk (`<COIL_CACHE_DIR>/autotune/<key[:2]>/<key>.blob`,
   coil.runtime.disk_cache: atomic, checksummed; a damaged or inconsistent entry is a miss,
   logged at INFO, and rewritten). A hit runs nothing. The key ignores the kernel's name, so the
   same kernel under another name (each layer of a transformer has its own copy of one softmax)
   is one problem: within one `tune` call, problems with equal keys are tuned once, and the
   others take that result (origin "memo").
2. **Compile.** Every candidate of every missed problem is loaded and, on a GPU, compiled ahead of
   time in one parallel batch (`compile.compile_variants`). A candidate that fails to compile is
   dropped (INFO log).
3. **Time.** Synthetic arguments are made once (seeded, so every candidate sees the same
   values; a private generator, the global RNG is untouched): floating buffers standard normal,
   integer buffers zeros (zero is a valid index for every gather and scatter), bool buffers
   False, ints the spec's values. The default runs once on them (its written buffers are the
   reference), then every compiled candidate is timed by `timing.measure` (CUDA events, median;
   a module attribute tests replace); one whose timing raises is discarded (INFO).
4. **Check (the miscompile guard), the fastest first.** The candidates faster than the default
   by more than SWITCH_MARGIN are checked from the fastest on, and the first that passes is
   kept (the default when none does): before it runs, every buffer is restored from the
   synthetic values (written buffers too: an element a candidate fails to write then differs),
   and its written buffers must match the default's (`matches`: floating ones within
   `tolerance(dtype, reduction_length, rounding)`, `rounding` the coarsest floating type among
   the kernel's buffers, NaN equal to NaN; others exactly). One that differs is discarded and
   logged at WARNING with the kernel's name and configuration; one that raises is discarded at
   INFO. A candidate that would not be kept is never checked (checking costs a run, a copy of
   every buffer and a comparison each).
5. **Store** the result in the memo and on disk.

If the default itself fails to compile or run on the synthetic arguments, the problem is left
untuned (choice 0, nothing cached): the real compile reports the error.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from coil.knobs import knobs
from coil.runtime import disk_cache, timing
from coil.runtime._triton import load_triton, torch_version
from coil.runtime.compile import _normalize, compile_variants
from coil.runtime.errors import KernelCompileError
from coil.runtime.interpreter import interpreter_enabled
from coil.runtime.kernel import Kernel
from coil.runtime.spec import KernelSpec, TensorArg

if TYPE_CHECKING:
    import torch

log = logging.getLogger("coil.runtime")

FORMAT_VERSION = 5  # bumped whenever a stored choice would be made otherwise (SWITCH_MARGIN, tolerance)
NAMESPACE = "autotune"
# leave the default only for a candidate more than 0.3 % faster: a tuning median repeats within
# about 0.2 %, so a smaller margin would switch on noise, and larger ones kept defaults that were
# measurably slower than the best candidate (docs/perf.md, "Codegen, runtime and lowering choices")
SWITCH_MARGIN = 0.003
SEED = 0


@dataclass(frozen=True)
class Candidate:
    """One launch configuration: the spec (constexprs, warps) and the grid at the tuning sizes."""

    spec: KernelSpec
    grid: tuple[int, ...]

    def describe(self) -> str:
        """`XBLOCK=8 RBLOCK=1024 warps=4 grid=(16,)`: the configuration, for logs and the cache."""
        consts = " ".join(f"{k}={v}" for k, v in sorted(self.spec.constexprs.items()))
        stages = f" stages={self.spec.num_stages}" if self.spec.num_stages != 1 else ""
        return f"{consts} warps={self.spec.num_warps}{stages} grid={self.grid}"


@dataclass(frozen=True)
class TuningProblem:
    """One kernel to tune.

    Attributes:
        candidates: the launches to compare, the default first; one kernel name, and equal `args`
            (pointer dtypes and int values) in every candidate.
        numels: elements of the buffer behind each `TensorArg` of `args`, in order.
        outputs: which `TensorArg`s (their positions among the TensorArgs, 0-based) the kernel
            writes: these are compared between candidates.
        reduction_length: elements reduced into each output (1 for none): widens the tolerance.

    Raises ValueError on construction when the fields disagree.
    """

    candidates: tuple[Candidate, ...]
    numels: tuple[int, ...]
    outputs: tuple[int, ...]
    reduction_length: int = 1

    def __post_init__(self) -> None:
        if not self.candidates:
            raise ValueError("a TuningProblem needs at least one candidate")
        first = self.candidates[0].spec
        for c in self.candidates[1:]:
            if c.spec.name != first.name or c.spec.args != first.args:
                raise ValueError(f"candidates of {first.name!r} differ in name or arguments")
        tensors = sum(isinstance(a, TensorArg) for a in first.args)
        if len(self.numels) != tensors or any(n < 0 for n in self.numels):
            raise ValueError(f"{first.name}: {len(self.numels)} buffer sizes for {tensors} pointer arguments")
        if any(not 0 <= i < tensors for i in self.outputs):
            raise ValueError(f"{first.name}: outputs {self.outputs} out of range")

    @property
    def name(self) -> str:
        return self.candidates[0].spec.name


@dataclass(frozen=True)
class TuningResult:
    """What tuning a problem gave.

    `choice`: index of the kept candidate (0: the default). `times_ms`: each candidate's median
    time (None: not timed). `rejected`: candidate index -> why it was dropped. `origin`: "tuned"
    (timed now), "memo" or "disk" (a cache hit: nothing ran), "untuned" (the default itself
    failed; nothing timed, nothing cached).
    """

    choice: int
    times_ms: tuple[float | None, ...]
    rejected: Mapping[int, str] = field(default_factory=dict)
    origin: str = "tuned"

    def __post_init__(self) -> None:
        object.__setattr__(self, "rejected", MappingProxyType(dict(self.rejected)))


_lock = threading.Lock()
_memo: dict[str, TuningResult] = {}


def clear_memo() -> None:
    """Forget this process's tuning results (tests; the disk cache stays)."""
    with _lock:
        _memo.clear()


def tune(problems: Sequence[TuningProblem], device: torch.device) -> list[TuningResult]:
    """Tune every problem on `device` (see the module docstring); results in order.

    Tensors are real whatever torch dispatch modes the caller runs under (a compiler backend is
    called inside AOTAutograd's fake-tensor mode): the modes are set aside while tuning runs."""
    from torch.utils._python_dispatch import _disable_current_modes

    with _disable_current_modes():
        return _tune_all(problems, _normalize(device))


def _tune_all(problems: Sequence[TuningProblem], device: torch.device) -> list[TuningResult]:
    keys = [problem_key(p, device) for p in problems]
    results: list[TuningResult | None] = [_cached(p, k) for p, k in zip(problems, keys, strict=True)]
    first: dict[str, int] = {}
    for i, r in enumerate(results):
        if r is None:
            first.setdefault(keys[i], i)
    todo = sorted(first.values())
    specs = [c.spec for i in todo for c in problems[i].candidates]
    compiled = compile_variants(specs, device) if specs else []
    at = 0
    for i in todo:
        n = len(problems[i].candidates)
        result = _tune_one(problems[i], compiled[at:at + n], device)
        at += n
        if result.origin == "tuned":
            _store(problems[i], keys[i], result)
        results[i] = result
    for i, r in enumerate(results):
        if r is None:  # the same kernel as an earlier problem, under another name
            same = results[first[keys[i]]]
            assert same is not None
            results[i] = TuningResult(same.choice, same.times_ms, same.rejected,
                                      "memo" if same.origin == "tuned" else same.origin)
    return [r for r in results if r is not None]


def problem_key(problem: TuningProblem, device: torch.device) -> str:
    """The cache key (64 hex digits) of `problem` on `device` (see the module docstring)."""
    h = hashlib.sha256()

    def add(*parts: object) -> None:
        for p in parts:
            h.update(str(p).encode("utf-8"))
            h.update(b"\0")

    add(f"coil-autotune-v{FORMAT_VERSION}", load_triton().version, torch_version(), device_description(device))
    for c in problem.candidates:  # code_key: source, arguments, constexprs, warps, stages, debug
        add(c.spec.code_key, c.grid)
    add(problem.numels, problem.outputs, problem.reduction_length)
    return h.hexdigest()


def device_description(device: torch.device) -> str:
    """The device's name and compute capability (CUDA), or its type and "interpreted"."""
    import torch

    if device.type == "cuda" and not interpreter_enabled(device):
        major, minor = torch.cuda.get_device_capability(device)
        return f"{torch.cuda.get_device_name(device)} sm_{major}{minor}"
    return f"{device.type} interpreted"


def tolerance(dtype: torch.dtype, reduction_length: int,
              rounding: torch.dtype | None = None) -> tuple[float, float]:
    """(rtol, atol) within which two launch configurations of one kernel must agree on a floating
    output of `dtype`: two roundings (one ulp each way) of the coarser of `dtype` and `rounding`
    plus the spread of a float32 (float64 for float64 outputs) accumulation reordered over
    `reduction_length` elements, taken as 16 eps * sqrt(length) (standard-normal data keeps
    partial sums near sqrt(length)). `rounding`: the coarsest floating type the kernel handles;
    a value it casts to bfloat16 on the way (an autocast region's sum, then a float32 result)
    may land one bfloat16 ulp apart under two summation orders, at any magnitude."""
    import torch

    acc = torch.float64 if dtype == torch.float64 else torch.float32
    ulp = max(torch.finfo(dtype).eps, torch.finfo(rounding).eps if rounding is not None else 0.0)
    tol = 2 * ulp + 16 * torch.finfo(acc).eps * max(1, reduction_length) ** 0.5
    return tol, tol


def coarsest_float(problem: TuningProblem) -> torch.dtype | None:
    """The floating type of largest epsilon among `problem`'s pointer arguments (None without one)."""
    import torch

    floats = [a.dtype for a in problem.candidates[0].spec.args if isinstance(a, TensorArg) and a.dtype.is_floating_point]
    return max(floats, key=lambda d: torch.finfo(d).eps, default=None)


def matches(got: torch.Tensor, want: torch.Tensor, reduction_length: int,
            rounding: torch.dtype | None = None) -> str | None:
    """None when `got` agrees with `want` (see `tolerance`); else what differs."""
    import torch

    if got.dtype.is_floating_point:
        rtol, atol = tolerance(got.dtype, reduction_length, rounding)
        wide = torch.float64 if got.dtype == torch.float64 else torch.float32  # exact for every narrower float
        g, w = got.to(wide), want.to(wide)
        close = torch.isclose(g, w, rtol=rtol, atol=atol, equal_nan=True)
        if bool(close.all()):
            return None
        bad = int((~close).sum())
        diff = (g - w).abs().nan_to_num(float("inf"))[~close].max()
        return f"{bad} of {got.numel()} elements differ (max abs diff {float(diff):.3g}, rtol=atol={rtol:.2g})"
    if torch.equal(got, want):
        return None
    return f"{int((got != want).sum())} of {got.numel()} elements differ"


def make_arguments(problem: TuningProblem, device: torch.device) -> list[object]:
    """The synthetic arguments of `problem` (see the module docstring, step 3), in `args` order."""
    import torch

    gen = torch.Generator(device=device)
    gen.manual_seed(SEED)
    out: list[object] = []
    numels = iter(problem.numels)
    for a in problem.candidates[0].spec.args:
        if not isinstance(a, TensorArg):
            out.append(a)
            continue
        n = next(numels)
        if a.dtype.is_floating_point:
            out.append(torch.randn(n, generator=gen, device=device, dtype=torch.float32).to(a.dtype))
        else:
            out.append(torch.zeros(n, dtype=a.dtype, device=device))
    return out


def _tensors(args: Sequence[object]) -> list[torch.Tensor]:
    import torch

    return [a for a in args if isinstance(a, torch.Tensor)]


def _tune_one(problem: TuningProblem, kernels: Sequence[Kernel | KernelCompileError],
              device: torch.device) -> TuningResult:
    """Steps 3 and 4 of the module docstring for one problem whose candidates are compiled."""
    import torch

    n = len(problem.candidates)
    untimed: tuple[float | None, ...] = (None,) * n
    default = kernels[0]
    if isinstance(default, KernelCompileError):
        log.info("coil: autotuning %s: the default configuration did not compile (%s)", problem.name, default)
        return TuningResult(0, untimed, {0: f"compile: {default}"}, "untuned")
    try:  # synthetic arguments (may run out of memory), the default's reference outputs
        base = make_arguments(problem, device)
        work = [a.clone() if isinstance(a, torch.Tensor) else a for a in base]
        base_buffers = _tensors(base)
        default(problem.candidates[0].grid, *work)
        reference = [_tensors(work)[i].clone() for i in problem.outputs]
    except Exception as exc:
        log.info("coil: autotuning %s: the default configuration failed on synthetic inputs (%s)", problem.name, exc)
        return TuningResult(0, untimed, {0: f"launch: {exc}"}, "untuned")
    rejected: dict[int, str] = {}
    times: list[float | None] = [None] * n
    for i, kernel in enumerate(kernels):
        if not isinstance(kernel, Kernel):
            rejected[i] = _not_compiled(problem, i, kernel)
            continue
        try:
            times[i] = float(timing.measure(kernel, problem.candidates[i].grid, work))
        except Exception as exc:
            rejected[i] = f"timing: {exc}"
            log.info("coil: autotuning %s: timing %s failed: %s", problem.name, problem.candidates[i].describe(), exc)
    t0 = times[0]
    if t0 is None:
        return TuningResult(0, untimed, rejected, "untuned")
    # the fastest first, each checked only when it would be kept: most candidates never need the
    # check, and one that fails it gives way to the next fastest
    faster = sorted((t, i) for i, t in enumerate(times) if i and t is not None and t < (1 - SWITCH_MARGIN) * t0)
    for _, i in faster:
        why = _check(problem, i, kernels[i], work, base_buffers, reference)
        if why is None:
            return TuningResult(i, tuple(times), rejected, "tuned")
        rejected[i] = why
    return TuningResult(0, tuple(times), rejected, "tuned")


def _not_compiled(problem: TuningProblem, i: int, error: KernelCompileError) -> str:
    """Why candidate `i`, which did not compile, is discarded (logged at INFO)."""
    why = f"compile: {error.__cause__ or error}"
    log.info("coil: autotuning %s: %s did not compile: %s", problem.name, problem.candidates[i].describe(), why)
    return why


def _check(problem: TuningProblem, i: int, kernel: Kernel | KernelCompileError, work: list[object],
           base: list[torch.Tensor], reference: list[torch.Tensor]) -> str | None:
    """Why candidate `i` must be discarded (it raised, or computes other values than the
    default: `reference`), or None. Runs it on `work` (the arguments) with every buffer
    restored from `base` first."""
    cand = problem.candidates[i]
    assert isinstance(kernel, Kernel)
    buffers = _tensors(work)
    try:
        for b, v in zip(buffers, base, strict=True):
            b.copy_(v)
        kernel(cand.grid, *work)
        rounding = coarsest_float(problem)
        diff = next((w for w in (matches(buffers[o], ref, problem.reduction_length, rounding)
                                 for o, ref in zip(problem.outputs, reference, strict=True)) if w), None)
    except Exception as exc:
        log.info("coil: autotuning %s: %s failed: %s", problem.name, cand.describe(), exc)
        return f"launch: {exc}"
    if diff is None:
        return None
    log.warning("coil: autotuning %s: %s computes other values than the default configuration (%s): "
                "candidate discarded", problem.name, cand.describe(), diff)
    return f"wrong output: {diff}"


def _payload(problem: TuningProblem, result: TuningResult) -> str:
    return json.dumps({
        "format": FORMAT_VERSION, "kernel": problem.name, "choice": result.choice,
        "configs": [c.describe() for c in problem.candidates], "times_ms": list(result.times_ms),
        "rejected": {str(i): why for i, why in result.rejected.items()},
    }, sort_keys=True)


def _parse(problem: TuningProblem, text: str) -> TuningResult | None:
    try:
        d: dict[str, Any] = json.loads(text)
        configs = [c.describe() for c in problem.candidates]
        choice = d["choice"]
        times = tuple(None if t is None else float(t) for t in d["times_ms"])
        rejected = {int(i): str(w) for i, w in d["rejected"].items()}
        ok = (d["format"] == FORMAT_VERSION and d["configs"] == configs
              and isinstance(choice, int) and 0 <= choice < len(configs) and choice not in rejected
              and len(times) == len(configs))
    except (ValueError, KeyError, TypeError, AttributeError):
        ok = False
    if not ok:
        return None
    return TuningResult(choice, times, rejected, "disk")


def _cached(problem: TuningProblem, key: str) -> TuningResult | None:
    with _lock:
        hit = _memo.get(key)
    if hit is not None:
        return TuningResult(hit.choice, hit.times_ms, hit.rejected, "memo")
    path = disk_cache.blob_path(knobs.cache_dir, NAMESPACE, key)
    text = disk_cache.read_blob(path, key)
    if text is None:
        return None
    result = _parse(problem, text)
    if result is None:
        log.info("coil: autotune cache entry %s does not describe %s: tuning it again", path, problem.name)
        return None
    with _lock:
        _memo[key] = result
    return result


def _store(problem: TuningProblem, key: str, result: TuningResult) -> None:
    with _lock:
        _memo[key] = result
    path = disk_cache.blob_path(knobs.cache_dir, NAMESPACE, key)
    try:
        disk_cache.write_blob(path, key, _payload(problem, result))
    except OSError as exc:
        log.info("coil: could not write the autotune cache entry %s (%s)", path, exc)
