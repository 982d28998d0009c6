"""`Kernel`: one loaded Triton kernel with its launch arguments bound."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coil.knobs import knobs
from coil.runtime import fast_launch
from coil.runtime._triton import load_triton
from coil.runtime.interpreter import RunFn, interpreted_run
from coil.runtime.spec import KernelSpec, TensorArg

if TYPE_CHECKING:
    import torch


def launch_options(spec: KernelSpec, interpreted: bool = False) -> dict[str, object]:
    """The Triton launch/compile options of `spec`: num_warps, num_stages and, for a compiled
    kernel with `spec.debug`, `debug=True, sanitize_overflow=False` (the interpreter takes its
    debug mode from `interpreted_run(..., debug=True)` instead)."""
    options: dict[str, object] = {"num_warps": spec.num_warps, "num_stages": spec.num_stages}
    if spec.debug and not interpreted:
        options.update(debug=True, sanitize_overflow=False)
    return options


class Kernel:
    """A compiled (or, on the CPU, interpreted) Triton kernel, ready to launch.

    `kernel(grid, *args)` launches `spec.name` over `grid` (1 to 3 ints; zeros launch nothing)
    with the positional `args` (tensors for `TensorArg`s, ints) and the spec's constexprs,
    num_warps and num_stages (and Triton's debug mode when `spec.debug`). The launch is asynchronous on a GPU (current stream of the current
    device); under the interpreter it runs to completion before returning.

    GPU launches take the fast path (`fast_launch`, on unless COIL_FAST_LAUNCH=0): the first
    launch goes through Triton's `JITFunction.run`, which finds (or compiles) the binary; its
    compiled kernel is then bound under the arguments' specialisation key (device, dtypes, 16-byte
    alignment of pointers, ints equal to 1 / divisible by 16 / their width), and later launches
    with the same key call the launcher's C entry point directly with the raw arguments. A launch
    whose key differs takes `JITFunction.run` again (and binds its kernel), so results are always
    those of `JITFunction.run`. The interpreter path is unchanged.

    Attributes (read-only by convention): `name`, `spec`, `path` (the cached module source),
    `device`, `interpreted`, `fn` (the object from the module, a Triton `JITFunction` unless
    TRITON_INTERPRET was set when it was loaded).
    """

    __slots__ = (
        "_kwargs", "_launch", "_plan", "_run", "_table", "device", "fn", "interpreted", "name",
        "path", "spec",
    )

    def __init__(
        self, spec: KernelSpec, fn: Any, path: Path, device: torch.device, interpreted: bool
    ) -> None:
        self.name = spec.name
        self.spec = spec
        self.path = path
        self.device = device
        self.interpreted = interpreted
        self.fn = fn
        self._kwargs: dict[str, object] = {**spec.constexprs, **launch_options(spec, interpreted)}
        self._run: RunFn = interpreted_run(fn, debug=spec.debug) if interpreted else fn.run
        self._table: dict[tuple[object, ...], tuple[Any, ...]] = {}
        self._plan: fast_launch.ParamPlan | None = None
        self._launch: Callable[..., None] = self._launch_slow
        if (
            not interpreted
            and device.type == "cuda"
            and knobs.fast_launch
            and isinstance(fn, load_triton().jit_function_type)
        ):
            self._plan = fast_launch.plan_params(fn, spec.args, dict(spec.constexprs), TensorArg)
            if self._plan is not None:
                self._launch = self._launch_first

    def __call__(self, grid: tuple[int, ...], *args: object) -> None:
        """Launch over `grid` with positional `args` (see the class docstring)."""
        self._launch(grid, *args)

    @property
    def fast(self) -> bool:
        """True once launches of this kernel take the fast path (see the class docstring)."""
        return self._launch != self._launch_slow and self._launch != self._launch_first

    @property
    def bound_keys(self) -> tuple[tuple[object, ...], ...]:
        """The specialisation keys bound to a compiled kernel so far (fast path; diagnostics)."""
        return tuple(self._table)

    def _launch_slow(self, grid: tuple[int, ...], *args: object) -> None:
        self._run(*args, grid=grid, warmup=False, **self._kwargs)

    def _launch_first(self, grid: tuple[int, ...], *args: object) -> None:
        """The first GPU launch: through Triton, then build the fast launcher."""
        compiled = self._run(*args, grid=grid, warmup=False, **self._kwargs)
        if compiled is None or self._plan is None:
            return
        import torch
        from triton import knobs as triton_knobs
        from triton.runtime import driver

        layout = fast_launch.process_layout(compiled)
        get_device: Callable[[], int] = getattr(torch._C, "_cuda_getDevice", torch.cuda.current_device)
        self._launch = fast_launch.make_launch(
            self._plan.kinds, self._plan.trailing, layout, self._table, self._miss, get_device,
            driver.active.get_current_stream, triton_knobs.runtime,
        )
        self._bind(compiled, get_device(), args)

    def _miss(self, key: tuple[object, ...] | None, grid: tuple[int, ...],
              args: tuple[object, ...]) -> None:
        """A launch the fast path cannot take: run it through Triton, bind the result's key."""
        compiled = self._run(*args, grid=grid, warmup=False, **self._kwargs)
        if key is not None and compiled is not None and key not in self._table:
            self._bind(compiled, key[0], args)

    def _bind(self, compiled: Any, device: Any, args: tuple[object, ...]) -> None:
        import torch

        plan = self._plan
        if plan is None or len(self._table) >= fast_launch.MAX_BOUND:
            return
        if not fast_launch.args_bindable(plan.kinds, args, torch.Tensor):
            return
        key = fast_launch.python_key(plan.kinds, device, args)
        layout = fast_launch.process_layout(compiled)
        self._table[key] = fast_launch.bind_entry(compiled, layout)

    def __repr__(self) -> str:
        mode = "interpreted" if self.interpreted else "compiled"
        return f"<coil Kernel {self.name!r} {mode} on {self.device} from {self.path}>"
