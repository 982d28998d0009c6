"""The module around a kernel: imports, and the helper functions its text calls (`module`)."""

from __future__ import annotations

from coil.triton_codegen.casts import cast_helpers

PRELUDE = {
    "cuda": "import triton\nimport triton.language as tl\nfrom triton.language.extra import libdevice\n",
    "interpret": "import triton\nimport triton.language as tl\n",
}
# the combine functions of reductions emitted as tl.reduce (prod; a float max/min propagating NaN,
# KernelWriter.final), each added to the kernels that call it. coil.runtime.interpreter matches
# them by name (its numpy path for Triton's interpreter): rename or add one in both places
# (tests-integration/test_reductions.py fails otherwise)
HELPERS = {
    "_coil_mul": "\n@triton.jit\ndef _coil_mul(a, b):\n    return a * b\n\n",
    "_coil_max_nan": "\n@triton.jit\ndef _coil_max_nan(a, b):\n    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)\n\n",
    "_coil_min_nan": "\n@triton.jit\ndef _coil_min_nan(a, b):\n    return tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)\n\n",
}
# the interpreter has no libdevice: atan by range reduction and an odd polynomial (error < 2e-7)
INTERPRET_HELPERS = """
@triton.jit
def _coil_atan(x):
    ax = tl.abs(x)
    big = ax > 1.0
    t = tl.where(big, 1.0 / tl.where(ax == 0, 1.0, ax), ax)
    mid = t > 0.41421356237309503
    u = tl.where(mid, (t - 1.0) / (t + 1.0), t)
    u2 = u * u
    p = u * (1.0 + u2 * (-0.3333333333333333 + u2 * (0.2 + u2 * (-0.14285714285714285 + u2 * (
        0.1111111111111111 + u2 * (-0.09090909090909091 + u2 * 0.07692307692307693))))))
    r = tl.where(mid, 0.7853981633974483 + p, p)
    r = tl.where(big, 1.5707963267948966 - r, r)
    return tl.where(x < 0, -r, r)


@triton.jit
def _coil_atan2(y, x):
    base = _coil_atan(y / tl.where(x == 0, 1.0, x))
    pi = 3.141592653589793
    r = tl.where(x > 0, base, tl.where(y >= 0, base + pi, base - pi))
    return tl.where(x == 0, tl.where(y > 0, pi / 2, tl.where(y < 0, -pi / 2, 0.0 * y)), r)

"""


# a plain function, run as Python by the interpreter: a run-time int argument reaches an interpreted
# kernel as a tensor over a one-element array, and Triton before 3.9 converts it for `range` with
# int(array), which NumPy 2 refuses ("only 0-dimensional arrays can be converted to Python
# scalars"), so a loop over a run-time bound fails there without it
INTERPRET_INDEX = """
def _coil_index(n):
    handle = getattr(n, "handle", None)
    return int(handle.data.reshape(-1)[0]) if handle is not None else int(n)

"""


def helpers(source: str, target: str) -> str:
    """The helper functions `source` calls (only those: each @triton.jit adds to the module's
    load time)."""
    out = "".join(h for name, h in HELPERS.items() if name in source) + cast_helpers(source)
    if target != "cuda" and "_coil_atan" in source:  # _coil_atan2 calls _coil_atan
        out += INTERPRET_HELPERS
    if target != "cuda" and "_coil_index(" in source:
        out += INTERPRET_INDEX
    return out


def module(kernel: str, target: str) -> str:
    """The whole module of one kernel's text `kernel`: imports, then the helpers it calls."""
    return PRELUDE["cuda" if target == "cuda" else "interpret"] + helpers(kernel, target) + kernel
