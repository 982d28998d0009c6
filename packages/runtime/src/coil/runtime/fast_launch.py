"""The fast launch path: call a compiled Triton kernel's launcher directly, skipping `JITFunction.run`.

`JITFunction.run` does, per launch: read several Triton knobs (some from the environment), bind the
arguments to the signature, specialise every argument (type, 16-byte alignment of pointers, ints
equal to 1 or divisible by 16), build a string cache key, look the compiled kernel up, check the
kernel's global variables, compute launch metadata, then call the launcher. All of it is Python.

Here, per `Kernel`, a small function is generated (once, at the first launch) with the kernel's
exact arity. Per call it computes a *specialisation key* from the arguments with a handful of
attribute reads and comparisons, looks the key up in a dict of bound launchers, and calls the
launcher's C entry point with the raw arguments:

    key = (device, x.dtype, not x.data_ptr() & 15, ..., n == 1, not n & 15,
           -2**31 <= n < 2**31, n < 2**63)

The key is at least as fine as Triton's own specialisation (`native_specialize_impl`: pointer type
from the dtype, "D" when `data_ptr() % 16 == 0`; an int equal to 1 becomes a constexpr, "D" when
divisible by 16, type i32/i64/u64 by range; identical in Triton 3.6 and 3.9, checked by
`tests/test_fast_launch.py` against Triton itself). Equal keys therefore mean the same compiled
kernel. A key not seen yet (a new alignment, an int that becomes 1, another device, another dtype)
goes through `JITFunction.run` once (which finds or compiles the right binary and launches it),
and its compiled kernel is bound under that key for the next time.

The launcher call differs between Triton versions (the version-specific adapter, `_layout`):

* Triton 3.6 ("flat"): `CompiledKernel.run` is a `CudaLauncher` whose `launch` is a C function
  generated per signature: `launch(gx, gy, gz, stream, function, cooperative, pdl,
  global_scratch, profile_scratch, packed_metadata, launch_metadata, enter_hook, exit_hook,
  *args)`.
* Triton 3.9 ("packed"): one generic C launcher, `launch(gx, gy, gz, stream, function,
  cooperative, pdl, packed_metadata, launch_metadata, enter_hook, exit_hook, global_scratch,
  profile_scratch, arg_annotations, kernel_signature, args_tuple)`.
* Anything else, or a kernel needing global/profile scratch memory, Triton's sanitizer (gsan) or
  tensor descriptors: the portable `CompiledKernel.run(gx, gy, gz, stream, function,
  packed_metadata, launch_metadata, enter_hook, exit_hook, *args)` (the same in 3.6 and 3.9; it
  allocates scratch itself), wrapped to the layout's argument order.

`args` are all the kernel's parameters in order, constexprs included (the launchers skip them),
exactly as `JITFunction.run` passes them.

What the fast path does not do (documented limits): it skips Triton's launch hooks only when none
is installed (with a `launch_enter_hook`/`launch_exit_hook` installed, e.g. by proton, every launch
takes `JITFunction.run`); it does not re-check the kernel's global variables (Triton raises when
one changed since compilation) nor re-read TRITON_DEBUG and the instrumentation knobs (they are
fixed when a key is first bound); `pre_run_hooks` added to the JITFunction later are not run.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable
from typing import Any

LaunchFn = Callable[..., None]

MAX_BOUND = 64  # specialisations bound per kernel; past that, new keys always take run()

_INT32_MIN = -(2**31)
_INT32_END = 2**31
_INT64_END = 2**63

_layout_lock = threading.Lock()
_layout_cache: list[str] = []  # the process's launcher layout, once known


def layout_of(compiled: Any) -> str:
    """'flat' (Triton 3.6), 'packed' (3.9) or 'portable': how `compiled`'s launcher is called."""
    launcher = getattr(compiled, "run", None)  # the property initialises the handles
    c_launch = getattr(launcher, "launch", None)
    if launcher is None or c_launch is None:
        return "portable"
    if hasattr(launcher, "arg_annotations") and hasattr(launcher, "kernel_signature"):
        return "packed"
    try:
        params = list(inspect.signature(type(launcher).__call__).parameters.values())
    except (TypeError, ValueError):
        return "portable"
    names = [p.name for p in params]
    if names[:6] == ["self", "gridX", "gridY", "gridZ", "stream", "function"] and len(params) == 7 \
            and params[6].kind is inspect.Parameter.VAR_POSITIONAL:
        return "flat"
    return "portable"


def _direct_ok(compiled: Any, launcher: Any) -> bool:
    """True when `launcher.launch` may be called with no scratch memory and no extra arguments."""
    metadata = compiled.metadata
    return (
        getattr(metadata, "global_scratch_size", 0) == 0
        and getattr(metadata, "profile_scratch_size", 0) == 0
        and not getattr(launcher, "gsan_enabled", False)
        and not getattr(metadata, "tensordesc_meta", None)
    )


def bind_entry(compiled: Any, layout: str) -> tuple[Any, ...]:
    """The table entry the generated launcher unpacks for `compiled` under `layout`.

    Every layout's entry is (launch, function, cooperative, pdl, packed_metadata, annotations,
    signature); `launch` accepts the layout's argument order (see the module docstring).
    """
    if hasattr(compiled, "result"):  # an async-compile future (Triton's _async_compile mode)
        compiled = compiled.result()
    launcher = compiled.run  # initialises the handles (loads the binary) on the current device
    function = compiled.function
    packed = compiled.packed_metadata
    portable_run = launcher

    if layout == "flat":
        if _direct_ok(compiled, launcher):
            return (launcher.launch, function, launcher.launch_cooperative_grid,
                    launcher.launch_pdl, packed, None, None)

        def flat(gx: int, gy: int, gz: int, stream: int, fn: Any, _coop: object, _pdl: object,
                 _gs: object, _ps: object, md: Any, _lm: object, _eh: object, _xh: object,
                 *args: object) -> None:
            portable_run(gx, gy, gz, stream, fn, md, None, None, None, *args)

        return (flat, function, False, False, packed, None, None)

    if layout == "packed":
        if _direct_ok(compiled, launcher):
            return (launcher.launch, function, launcher.launch_cooperative_grid,
                    launcher.launch_pdl, packed, launcher.arg_annotations,
                    launcher.kernel_signature)

        def packed_fn(gx: int, gy: int, gz: int, stream: int, fn: Any, _coop: object,
                      _pdl: object, md: Any, _lm: object, _eh: object, _xh: object, _gs: object,
                      _ps: object, _ann: object, _sig: object, args: tuple[object, ...]) -> None:
            portable_run(gx, gy, gz, stream, fn, md, None, None, None, *args)

        return (packed_fn, function, False, False, packed, None, None)

    def portable(gx: int, gy: int, gz: int, stream: int, fn: Any, md: Any,
                 *args: object) -> None:
        portable_run(gx, gy, gz, stream, fn, md, None, None, None, *args)

    return (portable, function, False, False, packed, None, None)


def process_layout(compiled: Any) -> str:
    """The launcher layout, detected once per process from the first compiled kernel bound."""
    with _layout_lock:
        if not _layout_cache:
            _layout_cache.append(layout_of(compiled))
        return _layout_cache[0]


class ParamPlan:
    """How one kernel's arguments map onto its JITFunction parameters (None: no fast path)."""

    def __init__(self, kinds: list[str], trailing: tuple[object, ...]) -> None:
        self.kinds = kinds  # per positional arg: "ptr", "ptr_noalign", "int", "int_nospec"
        self.trailing = trailing  # constexpr values, in parameter order, after the positionals


def plan_params(fn: Any, spec_args: tuple[object, ...], constexprs: dict[str, object],
                tensor_arg_type: type) -> ParamPlan | None:
    """Match `fn.params` to the spec; None when the fast path cannot handle this kernel.

    Handled: the spec's positional args (TensorArg / int) are exactly the leading non-constexpr
    parameters, with no type annotation; every later parameter is a constexpr bound by `constexprs`.
    """
    params = getattr(fn, "params", None)
    if params is None or getattr(fn, "pre_run_hooks", None):
        return None
    n = len(spec_args)
    if len(params) < n:
        return None
    kinds: list[str] = []
    for param, arg in zip(params[:n], spec_args, strict=True):
        if param.is_constexpr or getattr(param, "annotation_type", "") or param.is_const:
            return None
        if isinstance(arg, tensor_arg_type):
            kinds.append("ptr_noalign" if param.do_not_specialize_on_alignment or
                         param.do_not_specialize else "ptr")
        elif isinstance(arg, int):
            kinds.append("int_nospec" if param.do_not_specialize else "int")
        else:
            return None
    trailing: list[object] = []
    for param in params[n:]:
        if not param.is_constexpr or param.name not in constexprs:
            return None
        trailing.append(constexprs[param.name])
    if len(trailing) != len(constexprs):
        return None
    return ParamPlan(kinds, tuple(trailing))


def key_terms(kind: str, name: str) -> list[str]:
    """The key's source terms for one argument (see the module docstring)."""
    if kind == "ptr":
        return [f"{name}.dtype", f"not {name}.data_ptr() & 15"]
    if kind == "ptr_noalign":
        return [f"{name}.dtype"]
    ranges = [f"{_INT32_MIN} <= {name} < {_INT32_END}", f"{name} < {_INT64_END}"]
    if kind == "int":
        return [f"{name} == 1", f"not {name} & 15", *ranges]
    return ranges


def python_key(kinds: list[str], device: int, args: tuple[Any, ...]) -> tuple[object, ...]:
    """The same key as the generated code, computed by a loop (tests and AOT binding)."""
    terms: list[object] = [device]
    for kind, a in zip(kinds, args, strict=True):
        if kind.startswith("ptr"):
            terms.append(a.dtype)
            if kind == "ptr":
                terms.append(not a.data_ptr() & 15)
        else:
            if kind == "int":
                terms += [a == 1, not a & 15]
            terms += [_INT32_MIN <= a < _INT32_END, a < _INT64_END]
    return tuple(terms)


def args_bindable(kinds: list[str], args: tuple[Any, ...], tensor_type: type) -> bool:
    """True when `args` have the kinds the key assumes (tensors for pointers, plain ints)."""
    if len(args) != len(kinds):
        return False
    for kind, a in zip(kinds, args, strict=True):
        if kind.startswith("ptr"):
            if not isinstance(a, tensor_type):
                return False
        elif type(a) is not int:
            return False
    return True


_CALL = {
    "flat": "e[0](g0, g1, g2, get_stream(key[0]), e[1], e[2], e[3], None, None, e[4], None, "
            "None, None, {args})",
    "packed": "e[0](g0, g1, g2, get_stream(key[0]), e[1], e[2], e[3], e[4], None, None, None, "
              "None, None, e[5], e[6], ({args},))",
    "portable": "e[0](g0, g1, g2, get_stream(key[0]), e[1], e[4], {args})",
}


def generate(kinds: list[str], n_trailing: int, layout: str) -> str:
    """Source of `make(table, miss, get_device, get_stream, rt, C, hooks...) -> launch(grid, *args)`.

    The hook check: Triton 3.6 and 3.9 keep a `HookChain` object in `knobs.runtime.launch_enter_hook`
    and `launch_exit_hook` (empty by default). The generated code takes `miss` (hence
    `JITFunction.run`, which calls the hooks with launch metadata) when either knob was reassigned
    since the launcher was made, or a chain is not empty.
    """
    names = [f"a{i}" for i in range(len(kinds))]
    terms = ["get_device()"]
    for kind, name in zip(kinds, names, strict=True):
        terms += key_terms(kind, name)
    call_args = ", ".join(names + [f"C[{i}]" for i in range(n_trailing)])
    params = ", ".join(["grid", *names])
    tup = "(" + "".join(f"{n}, " for n in names) + ")"
    call = _CALL[layout].format(args=call_args)
    return f"""
def make(table, miss, get_device, get_stream, rt, C, ENTER, ENTER_CALLS, EXIT, EXIT_CALLS):
    def launch({params}):
        try:
            key = ({", ".join(terms)},)
        except (AttributeError, TypeError):
            return miss(None, grid, {tup})
        e = table.get(key)
        if (e is None or rt.launch_enter_hook is not ENTER or ENTER_CALLS
                or rt.launch_exit_hook is not EXIT or EXIT_CALLS):
            return miss(key, grid, {tup})
        n = len(grid)
        if n == 1:
            g0 = grid[0]; g1 = 1; g2 = 1
        elif n == 2:
            g0, g1 = grid; g2 = 1
        else:
            g0, g1, g2 = grid
        {call}
    return launch
"""


_code_cache: dict[str, Any] = {}


def make_launch(kinds: list[str], trailing: tuple[object, ...], layout: str,
                table: dict[tuple[object, ...], tuple[Any, ...]],
                miss: Callable[..., None], get_device: Callable[[], int],
                get_stream: Callable[[int], int], rt: Any) -> LaunchFn:
    """Build the fast launcher (code objects are shared by kernels of one shape)."""
    source = generate(kinds, len(trailing), layout)
    code = _code_cache.get(source)
    if code is None:
        code = compile(source, f"<coil fast launch {len(kinds)} args, {layout}>", "exec")
        _code_cache[source] = code
    namespace: dict[str, Any] = {}
    exec(code, namespace)
    enter, enter_calls = _hook_state(rt.launch_enter_hook)
    exit_, exit_calls = _hook_state(rt.launch_exit_hook)
    launch: LaunchFn = namespace["make"](table, miss, get_device, get_stream, rt, trailing,
                                         enter, enter_calls, exit_, exit_calls)
    return launch


def _hook_state(hook: Any) -> tuple[Any, list[Any]]:
    """(the hook object, a list that is non-empty while it is active)."""
    if hook is None:
        return None, []
    calls = getattr(hook, "calls", None)
    if isinstance(calls, list):
        return hook, calls  # a HookChain: its own list, so additions are seen
    return hook, [hook]  # a plain callable: always active
