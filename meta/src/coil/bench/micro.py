"""The micro half of `coil bench`: eight fused operations on 16384 x 8192 tensors, bf16 and fp32.

Each case runs in the bench's own process. Every mode compiles on fresh caches
(`measure.cold_caches`) and its first call is timed from `torch.compile` on; accuracy follows the
PyTorch benchmark harness's rule against an fp64 reference: RMSE(mode) <= 3 * RMSE(eager) +
tol / 10 (tol 1e-2 for bf16, 1e-4 for fp32). Once every mode has compiled, the modes are timed in
interleaved rounds (`--rounds`, default ROUNDS; coil.bench.rounds): a mode's time is the median
of its rounds, and the modes of coil.bench.pairs' PAIRS are compared round by round. A case also reports achieved
GB/s (bytes of the inputs read + output written / median time) against a device-to-device copy
of a same-size tensor measured in the same run.
"""

from __future__ import annotations

import functools
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coil.bench import measure
from coil.bench.measure import MODES, compile_mode, is_coil
from coil.bench.steps import MULTIPLIER, rmse

if TYPE_CHECKING:
    import torch

ROWS, COLS = 16384, 8192
# interleaved timing rounds of a micro case (coil.bench.rounds; `coil bench --rounds`)
ROUNDS = 5


def _tol(dtype: torch.dtype) -> float:
    import torch

    return 1e-2 if dtype in (torch.bfloat16, torch.float16) else 1e-4


@dataclass(frozen=True)
class Micro:
    """One micro case: fn(*inputs) on inputs made by make(dtype)."""

    base: str
    fn: Callable[..., torch.Tensor]
    make: Callable[[torch.dtype], tuple[torch.Tensor, ...]]


def _randn(*shape: int, dtype: torch.dtype) -> torch.Tensor:
    import torch

    return torch.randn(*shape, device="cuda", dtype=dtype)


def _bias_gelu(x: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    import torch.nn.functional as F

    return F.gelu(x + b)


def _softmax(x: torch.Tensor) -> torch.Tensor:
    import torch

    return torch.softmax(x, dim=-1)


def _layernorm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    import torch.nn.functional as F

    return F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)


def _rmsnorm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    import torch

    xf = x.float() if x.dtype != torch.float64 else x
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)
    return (y * w.to(y.dtype)).to(x.dtype)


def _sum0(x: torch.Tensor) -> torch.Tensor:
    return x.sum(0)


def _sum1(x: torch.Tensor) -> torch.Tensor:
    return x.sum(1)


def _chain(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    import torch

    return torch.sigmoid(x) * y + torch.tanh(z) * 0.5 - (x * z).abs()


def _xent(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    import torch.nn.functional as F

    return F.cross_entropy(logits, target)


def _targets() -> torch.Tensor:
    import torch

    return torch.randint(0, COLS, (ROWS,), device="cuda")


MICRO: tuple[Micro, ...] = (
    Micro("bias_gelu", _bias_gelu, lambda d: (_randn(ROWS, COLS, dtype=d), _randn(COLS, dtype=d))),
    Micro("softmax", _softmax, lambda d: (_randn(ROWS, COLS, dtype=d),)),
    Micro("layernorm", _layernorm, lambda d: (_randn(ROWS, COLS, dtype=d), _randn(COLS, dtype=d), _randn(COLS, dtype=d))),
    Micro("rmsnorm", _rmsnorm, lambda d: (_randn(ROWS, COLS, dtype=d), _randn(COLS, dtype=d))),
    Micro("sum_dim0", _sum0, lambda d: (_randn(ROWS, COLS, dtype=d),)),
    Micro("sum_dim1", _sum1, lambda d: (_randn(ROWS, COLS, dtype=d),)),
    Micro("pointwise_chain", _chain, lambda d: tuple(_randn(ROWS, COLS, dtype=d) for _ in range(3))),
    Micro("cross_entropy", _xent, lambda d: (_randn(ROWS, COLS, dtype=d), _targets())),
)
DTYPES = ("bf16", "fp32")


class Ctx:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.copy_gbs: dict[str, float] = {}

    def copy_bw(self, dtype_name: str) -> float:
        """GB/s of a device-to-device copy of a ROWS x COLS tensor of this dtype (read + write)."""
        import torch

        if dtype_name not in self.copy_gbs:
            dt = torch.bfloat16 if dtype_name == "bf16" else torch.float32
            src = _randn(ROWS, COLS, dtype=dt)
            dst = torch.empty_like(src)
            ms = measure.do_bench(lambda: dst.copy_(src), 25, 200)
            self.copy_gbs[dtype_name] = 2 * src.numel() * src.element_size() / (ms * 1e-3) / 1e9
            del src, dst
        return self.copy_gbs[dtype_name]


def run_micro(name: str, ctx: Ctx, modes: Sequence[str] = MODES, rounds: int = ROUNDS) -> dict[str, Any]:
    """One micro case in every mode: each mode's cold compile and first call, accuracy and warm
    peak in turn; then the modes' times in `rounds` interleaved rounds (coil.bench.rounds),
    each round one `do_bench` median per mode. A mode's `ms` is the median of its rounds
    (`ms_rounds` has them all); `<a>_vs_<b>` compares two modes round by round, for
    coil.bench.pairs' PAIRS and coil against Inductor's default."""
    import torch

    base, dname = name.rsplit("_", 1)
    spec = next(m for m in MICRO if m.base == base)
    dtype = torch.bfloat16 if dname == "bf16" else torch.float32
    tol = _tol(dtype)
    copy_gbs = ctx.copy_bw(dname)
    torch.manual_seed(0)
    inputs = spec.make(dtype)
    with torch.no_grad():
        ref = spec.fn(*[t.double() if t.is_floating_point() else t for t in inputs])
        eager_out = spec.fn(*inputs)
    nbytes = sum(t.numel() * t.element_size() for t in inputs) + eager_out.numel() * eager_out.element_size()
    e_rmse = rmse(eager_out, ref)
    del eager_out
    res: dict[str, Any] = {"kind": "micro", "dtype": dname, "shape": [ROWS, COLS], "bytes": nbytes,
                           "copy_gbs": copy_gbs, "rmse_eager": e_rmse, "tol": tol, "rounds": rounds}
    calls: dict[str, Callable[[], object]] = {}
    for mode in modes:
        r: dict[str, Any] = {}
        try:
            if is_coil(mode):
                import coil.backend as cb

                cb.reset()
            with torch.no_grad(), measure.cold_caches(ctx.root, f"{name}-{mode}"):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                f = compile_mode(spec.fn, mode)
                out = f(*inputs)
                torch.cuda.synchronize()
                r["first_call_s"] = time.perf_counter() - t0
            with torch.no_grad():
                rm = rmse(out, ref)
                del out
                r["rmse"] = rm
                r["accuracy_ok"] = rm <= MULTIPLIER * e_rmse + tol / 10
                r.update(measure.warm_peak(functools.partial(f, *inputs)))
            if is_coil(mode):
                r["graphs"] = measure.coil_graphs()
                r.update(measure.coil_counts(r["graphs"]))
            calls[mode] = functools.partial(f, *inputs)
        except Exception as exc:
            r["error"] = f"{type(exc).__name__}: {exc}"[:800]
            traceback.print_exc()
            torch.cuda.empty_cache()
        res[mode] = r
    _time_in_rounds(res, calls, rounds, nbytes, copy_gbs)
    torch.cuda.empty_cache()
    return res


def _time_in_rounds(res: dict[str, Any], calls: dict[str, Callable[[], object]], rounds: int,
                    nbytes: int, copy_gbs: float) -> None:
    """Each compiled mode's `ms` (median of `rounds` interleaved rounds), GB/s and % of copy into
    `res`, and the round-by-round comparisons of coil.bench.pairs' PAIRS and of coil with Inductor's
    default. The cold compiles reset
    Dynamo, so every mode but the last compiles again on its first call here (into the last
    mode's cache folders), outside the timing."""
    import torch
    from coil.bench.rounds import time_modes

    for mode in time_modes(res, calls, rounds, torch.no_grad()):
        r = res[mode]
        r["gbs"] = nbytes / (r["ms"] * 1e-3) / 1e9
        r["pct_copy"] = 100 * r["gbs"] / copy_gbs
