"""What a case of `coil bench`'s GEMM and attention suites is: a `KernelCase`.

A kernel case is one small function of tensors, the kind of code a model runs around a matmul or
an attention: `fn(*make(dims, device, dtype))`. `dims` are the case's sizes by name (`dims`: the
real size the bench measures; `small`: a few elements a side, what the CPU tests run). The
arguments are tensors and Python ints (a window length: a constant of the model); an int is the
same in every mode and in the reference.

- A forward case (`grad` empty) is timed as `fn(*args)` under `torch.no_grad()`; a forward and
  backward case (`grad`: the indices of the arguments differentiated) as the forward and
  `torch.autograd.grad` of its output, with a fixed random output gradient, for those
  arguments: `step(case, fn, args, grad_out, mode)` builds that call, which returns the output
  and then the gradients.
- `reference(case, args, grad_out)` is the same step in fp64 (every floating tensor cast,
  gradients of fresh fp64 leaves), run on the arguments' device one slice of the batch at a
  time along dim 0 of the arguments `batched` names (the rest passed whole), so an attention's
  fp64 scores stay within a few GiB; what the accuracy rule compares each mode with.
- `flex(args)`, attention cases only: the same computation written with
  `torch.nn.attention.flex_attention` (`score_mod`, `block_mask`): a function and its arguments
  (the same q, k, v tensors; a block mask built here, once, outside the timed call, as a model
  builds its mask once per batch). The bench's `flex` mode compiles that function with
  Inductor (coil.bench.measure).
- `reference_case` names the case whose eager time bounds this one's coil time, `limit` the
  bound (coil's time <= limit x the reference case's eager time): a fused GEMM against its bare
  cuBLAS matmul, a padded attention against unmasked flash attention (coil.bench.kernel_report).
- `flops(dims)`: the floating-point operations of one timed call, dense-equivalent for a masked
  attention (every score counted): the figure TFLOP/s are reported from.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from coil.bench.measure import mark_step

if TYPE_CHECKING:
    import torch

__all__ = ["Args", "Dims", "KernelCase", "randn", "reference", "step", "to_fp64"]

Dims = Mapping[str, int]
Args = tuple[Any, ...]


@dataclass(frozen=True)
class KernelCase:
    """One case of the gemm or attention suite (module docstring)."""

    name: str
    group: str
    describe: str
    fn: Callable[..., Any]
    make: Callable[[Dims, str, Any], Args]
    dims: Dims
    small: Dims
    flops: Callable[[Dims], float]
    grad: tuple[int, ...] = ()
    batched: tuple[int, ...] = ()
    flex: Callable[[Args], tuple[Callable[..., Any], Args]] | None = None
    reference_case: str | None = None
    limit: float = 1.0

    def __post_init__(self) -> None:
        if self.group not in ("gemm", "attention"):
            raise ValueError(f"{self.name}: group must be gemm or attention, got {self.group!r}")
        if set(self.dims) != set(self.small):
            raise ValueError(f"{self.name}: dims and small name different sizes")
        if self.batched and not set(self.grad) <= set(self.batched):
            raise ValueError(f"{self.name}: a differentiated argument must be batched when the reference is sliced")


def randn(shape: Sequence[int], device: str, dtype: Any, scale: float = 1.0) -> torch.Tensor:
    """A standard normal tensor (times `scale`) made on `device` in `dtype` (drawn in fp32, so
    every dtype gets the same values up to rounding)."""
    import torch

    t = torch.randn(*shape, device=device, dtype=torch.float32)
    return (t * scale if scale != 1.0 else t).to(dtype)


def to_fp64(x: Any) -> Any:
    """`x` in fp64 when it is a floating tensor; anything else as it is."""
    import torch

    return x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x


def step(case: KernelCase, fn: Callable[..., Any], args: Args, grad_out: torch.Tensor | None = None,
         mode: str = "eager") -> Callable[[], tuple[torch.Tensor, ...]]:
    """The timed call of `case` with `fn` (the case's function, compiled or not, or its flex
    form) on `args`: `(out,)` for a forward case, `(out, *grads)` for a forward and backward
    one (`grad_out` then required; the arguments at `case.grad` must require grad), each step
    marked as `mode`'s training loop marks it (`measure.mark_step`)."""
    import torch

    if not case.grad:
        return lambda: (fn(*args),)
    if grad_out is None:
        raise ValueError(f"{case.name}: a forward and backward step needs grad_out")
    leaves = [args[i] for i in case.grad]

    def fwd_bwd() -> tuple[torch.Tensor, ...]:
        mark_step(mode)
        out = fn(*args)
        return (out, *torch.autograd.grad(out, leaves, grad_out))

    return fwd_bwd


def reference(case: KernelCase, args: Args, grad_out: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
    """`step`'s outputs computed in fp64 from `args` (module docstring): sliced along the batch
    when `case.batched` names arguments, whole otherwise."""
    import torch

    if not case.batched:
        return _reference_whole(case, args, grad_out)
    n = args[case.batched[0]].shape[0]
    parts = [_reference_whole(case, tuple(a[b:b + 1] if i in case.batched else a for i, a in enumerate(args)),
                              None if grad_out is None else grad_out[b:b + 1]) for b in range(n)]
    return tuple(torch.cat(p, dim=0) for p in zip(*parts, strict=True))


def _reference_whole(case: KernelCase, args: Args, grad_out: torch.Tensor | None) -> tuple[torch.Tensor, ...]:
    import torch

    wide = tuple(to_fp64(a) for a in args)
    if not case.grad:
        with torch.no_grad():
            return (case.fn(*wide),)
    wide = tuple(a.detach().requires_grad_(True) if i in case.grad else a for i, a in enumerate(wide))
    got = step(case, case.fn, wide, None if grad_out is None else grad_out.double())()
    return tuple(t.detach() for t in got)
