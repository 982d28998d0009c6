"""The float64-reference rule for half-precision cases (float16, bfloat16).

coil fuses pointwise chains and reductions and keeps their intermediates in float32, where eager
PyTorch rounds to the half type after every ATen kernel. Bit-closeness to eager is then the wrong
oracle: both results carry rounding error, coil's usually less. For a float16/bfloat16 case whose
outputs fail `assert_close` against eager, the harness asks instead whether coil is *no further
from the exact answer than eager is*:

- the reference: the same sample with every floating-point tensor among the input, args and
  kwargs upcast to float64, run eagerly (seeded like the other runs, no autograd);
- for every output leaf, elementwise, in float64 (a = coil, e = eager, r = reference cast to
  float64):

      |a - r| <= |e - r| + atol + rtol * |r|

  with (atol, rtol) the defaults `torch.testing.assert_close` uses for the leaf's dtype
  (float16: 1e-5, 1e-3; bfloat16: 1e-5, 1.6e-2). An element also passes where a == e, where
  a == r (equal infinities), or where a is NaN and e or r is NaN.
- leaves that are not half-precision floating tensors (indices, integer or bool outputs,
  structure, shapes, dtypes) must still match eager exactly as `harness.compare` demands.

The case then passes with category "closer-to-fp64" (counted apart in the summary). When eager
cannot run the sample in float64 (it raises), or the reference's structure or shapes differ, the
case stays a mismatch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.utils._pytree as pytree

LOW_PRECISION = {"float16": torch.float16, "bfloat16": torch.bfloat16}
# torch.testing.assert_close's default (atol, rtol) per dtype
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float16: (1e-5, 1e-3),
    torch.bfloat16: (1e-5, 1.6e-2),
}


def upcast(tree: Any) -> Any:
    """A copy of `tree` with every floating-point tensor as float64 (detached, no grad)."""
    def one(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            c = x.detach().clone()
            return c.to(torch.float64) if c.is_floating_point() else c
        return x

    return pytree.tree_map(one, tree)


def reference(fn: Callable[..., Any], args: Any) -> Any | None:
    """`fn` on float64-upcast `args`, or None when eager raises on them."""
    try:
        with torch.no_grad():
            torch.manual_seed(0)
            return fn(*upcast(args))
    except Exception:
        return None


def leaf_violations(a: torch.Tensor, e: torch.Tensor, r: torch.Tensor) -> tuple[int, float, float]:
    """(elements breaking the rule, coil's max error, eager's max error) for one output leaf."""
    atol, rtol = TOLERANCES[e.dtype]
    a64, e64, r64 = (t.detach().to(torch.float64) for t in (a, e, r))
    err_a = (a64 - r64).abs()
    err_e = (e64 - r64).abs()
    ok = (err_a <= err_e + atol + rtol * r64.abs()) | (a64 == e64) | (a64 == r64)
    ok |= a64.isnan() & (e64.isnan() | r64.isnan())
    def worst(err: torch.Tensor) -> float:  # NaNs left out; an overflow to inf shows as inf
        err = err[~err.isnan()]
        return float(err.max()) if err.numel() else 0.0

    return int((~ok).sum()), worst(err_a), worst(err_e)


def closer_to_fp64(fn: Callable[..., Any], args: Any, dtype: str, actual: Any, expected: Any) -> str:
    """A non-empty note (the max errors per leaf) when the half-precision case `dtype` passes the
    float64-reference rule of this module; "" when it does not or the rule does not apply."""
    if dtype not in LOW_PRECISION:
        return ""
    ref = reference(fn, args)
    if ref is None:
        return ""
    a_leaves, a_spec = pytree.tree_flatten(actual)
    e_leaves, e_spec = pytree.tree_flatten(expected)
    r_leaves, r_spec = pytree.tree_flatten(ref)
    if not (a_spec == e_spec == r_spec):
        return ""
    notes = []
    for i, (a, e, r) in enumerate(zip(a_leaves, e_leaves, r_leaves, strict=True)):
        try:
            torch.testing.assert_close(a, e, equal_nan=True)
            continue
        except Exception:
            pass
        if not (isinstance(a, torch.Tensor) and isinstance(e, torch.Tensor) and isinstance(r, torch.Tensor)):
            return ""
        if e.dtype not in TOLERANCES or a.dtype != e.dtype or a.shape != e.shape or r.shape != e.shape:
            return ""
        bad, max_a, max_e = leaf_violations(a, e, r)
        if bad:
            return ""
        notes.append(f"output {i}: max |coil - fp64| {max_a:.3g}, max |eager - fp64| {max_e:.3g}")
    return "; ".join(notes) or "no leaf differs"
