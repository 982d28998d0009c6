"""Running Triton kernels on the CPU under Triton's interpreter, whatever the import order.

How Triton (3.6 and 3.9 alike) decides to interpret: `triton.jit` reads `triton.knobs.runtime
.interpret` (the TRITON_INTERPRET environment variable) when it *decorates* a function, and returns
an `InterpretedFunction` instead of a `JITFunction`. Triton's own standard library (`tl.zeros`,
`tl.sum`, `tl.cdiv`, ... are `@jit` functions) is decorated once, when `triton.language` is first
imported. So setting TRITON_INTERPRET after triton was imported (which Dynamo does before any
backend runs) is not enough: the kernel may be interpreted, but the first `tl.zeros` it calls is a
compiled-mode `JITFunction`, whose `__call__` raises "Cannot call @triton.jit'd outside of the
scope of a kernel".

What coil does, so that CPU kernels work in any process and GPU kernels keep working beside them:

1. triton and triton.language are imported in compiled mode (`_triton.load_triton`); kernel modules
   are loaded without touching TRITON_INTERPRET, so their functions are `JITFunction`s.
2. A kernel that must be interpreted is wrapped: `InterpretedFunction(jit_fn.fn)`.
3. While an interpreted kernel runs, `JITFunction.__call__` (which otherwise only raises) runs the
   callee through its own cached `InterpretedFunction`, so nested `@jit` calls (the standard
   library, user helpers) are interpreted too. The patch is installed and removed around each
   launch, under a process-wide lock: the interpreter itself patches `triton.language` globally
   while a kernel runs, so interpreted launches are serialised anyway.

4. Triton's interpreter rebinds `triton.language` builtins (`tl.program_id`, `tl.tensor`'s
   operators, ...) to its numpy semantics while a kernel runs. Triton 3.9 restores them after the
   launch; Triton 3.6 does not, and every GPU kernel compiled later in the process then fails
   (`'ir.value' object has no attribute 'dtype'` once a CPU graph ran before GPU ones). So each interpreted launch also snapshots the namespaces of the
   `triton.language` modules and of its tensor classes, and puts back whatever the launch rebound
   (`_language_kept`), whatever Triton's version does itself.

5. The interpreter runs a `tl.reduce` whose combine function is not one of Triton's own element by
   element in Python (`ReduceOps.generic_reduce`: a tensor made per element). coil's codegen
   reduces with three such combines (triton-codegen kernel.py: `_coil_max_nan`, `_coil_min_nan`,
   `_coil_mul`), and element by element a row as long as a language model's vocabulary takes
   minutes. While a coil launch runs, such a reduction of one
   tensor is the numpy reduction with the same result (`_fast_reductions`: `np.max` and `np.min`
   propagate NaN as those combines do; `np.prod`, whose integer products wrap to the same value
   once cast back). Every other reduction goes to the interpreter unchanged.

6. Triton 3.6's interpreter converts a `range` bound with `int()` of its array, which NumPy 2
   refuses for a run-time int (a one-element 1-D array there); Triton 3.9 squeezes first. While a
   coil launch runs, the conversion takes any one-element array (`_scalar_index`), so kernels
   loop over run-time bounds on both versions.

When TRITON_INTERPRET is already set for the whole process, everything is an `InterpretedFunction`
from the start and steps 2-3 are no-ops. Uses `triton.runtime.interpreter.InterpretedFunction`
(present with the same constructor in 3.6 and 3.9) and `triton.JITFunction`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from coil.knobs import knobs
from coil.runtime._triton import load_triton

if TYPE_CHECKING:
    import torch

RunFn = Callable[..., Any]


def interpreter_enabled(device: torch.device) -> bool:
    """True when kernels for `device` run under Triton's interpreter.

    That is on the CPU (always), and on any device when TRITON_INTERPRET is set (Triton's
    debugging mode). Never imports triton.
    """
    return device.type == "cpu" or knobs.triton_interpret


_lock = threading.RLock()
_interpreted: dict[int, tuple[object, Any]] = {}  # id(JITFunction) -> (it, its InterpretedFunction)


def _interpreted_function_type() -> type:
    try:
        from triton.runtime.interpreter import InterpretedFunction
    except ModuleNotFoundError as exc:
        if exc.name == "numpy":
            raise ImportError("Triton's interpreter (CPU kernels) needs numpy: pip install numpy") from exc
        raise
    return InterpretedFunction  # type: ignore[no-any-return]


def _interpreted_twin(jit_fn: object) -> Any:
    """The cached `InterpretedFunction` running `jit_fn`'s Python function (call under _lock)."""
    entry = _interpreted.get(id(jit_fn))
    if entry is not None and entry[0] is jit_fn:
        return entry[1]
    twin = _interpreted_function_type()(jit_fn.fn)  # type: ignore[attr-defined]
    _interpreted[id(jit_fn)] = (jit_fn, twin)  # holding jit_fn keeps its id unique
    return twin


def _call_interpreted(self: object, *args: Any, **kwargs: Any) -> Any:
    # Installed as JITFunction.__call__ while an interpreted kernel runs (see module docstring).
    return _interpreted_twin(self)(*args, **kwargs)


def interpreted_run(fn: object, *, debug: bool = False) -> RunFn:
    """A `run(*args, grid=..., warmup=False, **kwargs)` callable executing `fn` interpreted.

    `fn` is the `@triton.jit` object found in a kernel module: a `JITFunction` (wrapped here) or
    already an `InterpretedFunction` (TRITON_INTERPRET was set when it was decorated).

    With `debug`, each launch runs in the interpreter's debug mode, where `tl.device_assert`
    raises (it is a no-op otherwise). The interpreter's process-global builder options get
    `debug=debug, sanitize_overflow=False` for each launch (`_builder_options`) and are restored
    after it. Launches are serialised under this module's lock, so no other coil launch sees the
    switch.
    """
    jit_type = load_triton().jit_function_type
    with _lock:
        target: Any = _interpreted_twin(fn) if isinstance(fn, jit_type) else fn
    target_run: RunFn = target.run

    def run(*args: Any, **kwargs: Any) -> Any:
        with _lock:
            original = jit_type.__call__
            jit_type.__call__ = _call_interpreted  # type: ignore[method-assign]
            try:
                with _language_kept(), _builder_options(debug), _fast_reductions(), _scalar_index():
                    return target_run(*args, **kwargs)
            finally:
                jit_type.__call__ = original  # type: ignore[method-assign]

    return run


_MISSING = object()
_namespaces: tuple[int, list[Any]] = (-1, [])  # (len(sys.modules) when found, the objects)


def _language_namespaces() -> list[Any]:
    """The `triton.language` modules loaded now, and its tensor classes: what the interpreter
    rebinds (found again whenever the set of loaded modules changed)."""
    import sys

    global _namespaces
    if _namespaces[0] == len(sys.modules):
        return _namespaces[1]
    found: list[Any] = [m for name, m in list(sys.modules.items())
                        if m is not None and (name == "triton.language" or name.startswith("triton.language."))]
    core = sys.modules.get("triton.language.core")
    for cls_name in ("tensor", "tensor_descriptor_base", "tensor_descriptor", "block_type", "dtype"):
        cls = getattr(core, cls_name, None)
        if isinstance(cls, type):
            found.append(cls)
    _namespaces = (len(sys.modules), found)
    return found


@contextlib.contextmanager
def _language_kept() -> Iterator[None]:
    """Undo, after the block, any rebinding of a `triton.language` name made during it: a value
    that changed is put back, and a name that appeared on a tensor class is removed. Names that
    appear in a module stay: the interpreter copies its own globals into the module of each
    device function it rewrites (`tl.sum`'s), and its cached rewrites need them."""
    saved = [(ns, dict(vars(ns))) for ns in _language_namespaces()]
    try:
        yield
    finally:
        for ns, before in saved:
            now = vars(ns)
            if isinstance(ns, type):
                for name in [k for k in now if k not in before]:
                    with contextlib.suppress(AttributeError, TypeError):
                        delattr(ns, name)
            for name, value in before.items():
                if now.get(name, _MISSING) is not value:
                    with contextlib.suppress(AttributeError, TypeError):
                        setattr(ns, name, value)


@contextlib.contextmanager
def _builder_options(debug: bool) -> Iterator[None]:
    """The interpreter's builder options while the block runs: `debug` (asserts checked when
    True), and never `sanitize_overflow`. Outside debug mode the interpreter still computed
    Triton's int32 overflow check for every integer operation (a cast of both operands to int64,
    the operation again, two comparisons) and dropped it, its assert being off: about half of an
    interpreted training step's time (docs/perf.md). In debug mode it
    would flag intended wrap-around such as Philox's. The options are put back after the block."""
    from triton.runtime import interpreter

    builder: Any = interpreter.interpreter_builder
    old = builder.options
    builder.options = dataclasses.replace(old, debug=debug, sanitize_overflow=False)
    try:
        yield
    finally:
        builder.options = old


# coil's combine functions (triton-codegen kernel.py's HELPERS, by name: this package cannot import
# that one; tests-integration/test_reductions.py checks the two agree) -> the numpy reduction
# equal to folding a row with them
_NUMPY_REDUCTIONS = {"_coil_max_nan": "max", "_coil_min_nan": "min", "_coil_mul": "prod"}


def _numpy_reduction(reduce_op: Any, inputs: tuple[Any, ...]) -> Any | None:
    """The result of the interpreter's `ReduceOps` `reduce_op` over `inputs` through numpy, or None
    when it is not one tensor folded with one of coil's combine functions."""
    fn = getattr(getattr(reduce_op, "combine_fn", None), "fn", None)
    name = _NUMPY_REDUCTIONS.get(getattr(fn, "__name__", ""))
    if name is None or len(inputs) != 1:
        return None
    import numpy as np

    (x,) = inputs
    out = getattr(np, name)(x.handle.data, axis=reduce_op.axis, keepdims=reduce_op.keep_dims)
    return reduce_op.to_tensor(out, x.dtype)


@contextlib.contextmanager
def _fast_reductions() -> Iterator[None]:
    """While the block runs, the interpreter's reductions with coil's combine functions go through
    numpy (`_numpy_reduction`); others, and Triton versions without `ReduceOps.apply_impl`, as
    before. Call under `_lock`."""
    try:
        from triton.runtime.interpreter import ReduceOps
    except ImportError:
        yield
        return
    original = ReduceOps.__dict__.get("apply_impl")
    if original is None:
        yield
        return

    def apply_impl(self: Any, inputs: tuple[Any, ...]) -> Any:
        fast = _numpy_reduction(self, inputs)
        return original(self, inputs) if fast is None else fast

    ReduceOps.apply_impl = apply_impl
    try:
        yield
    finally:
        ReduceOps.apply_impl = original


def _index(self: Any) -> int:
    """`int(t)` for an interpreted tensor `t` holding one element, whatever its array's rank."""
    data = self.handle.data
    return int(data.reshape(-1)[0] if data.size == 1 else data)


@contextlib.contextmanager
def _scalar_index() -> Iterator[None]:
    """While the block runs, an interpreted tensor of one element converts to an int whatever its
    array's rank: a run-time int argument (and what is computed from it) reaches an interpreted
    kernel as a one-element 1-D array, and Triton before 3.9 converts a `range` bound with
    `int(array)`, which NumPy 2 refuses ("only 0-dimensional arrays can be converted to Python
    scalars"); Triton 3.9 squeezes first. The interpreter sets `tl.tensor.__index__` in
    `_patch_lang_tensor` at each launch (undone after it); this wraps that function to set the
    conversion above, through the same undo record. Call under `_lock`."""
    from triton.runtime import interpreter

    original = getattr(interpreter, "_patch_lang_tensor", None)
    if original is None:
        yield
        return

    def patch(tensor: Any, scope: Any) -> None:
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", _index)

    interpreter._patch_lang_tensor = patch
    try:
        yield
    finally:
        interpreter._patch_lang_tensor = original
