"""The roles of a captured call's inputs, and the tensor facts the CUDA-graph rules read.

Each input of a `CudaGraphRunner` is one of: *static* (used in place: parameters, buffers),
*read through a pointer table* (`indirect`: read in place at the caller's address each replay),
*copied* (a static buffer each replay copies into; a borrowed one is another runner's memory), or
a non-tensor value baked into the graph. `input_roles` decides this from the example inputs and
the `CaptureSpec`, and raises ValueError for roles that contradict each other.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from coil.runtime.cudagraph_options import CaptureSpec

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class InputRoles:
    """What each example input is (indices into the input list)."""

    device: torch.device            # the one CUDA device of the tensor inputs
    tensors: tuple[int, ...]        # every tensor input
    static: tuple[int, ...]         # used in place (sorted)
    indirect: tuple[int, ...]       # read through the pointer table
    scalars: Mapping[int, Any]      # non-tensor inputs, baked into the graph

    def copy_candidates(self, borrowed: Iterable[int]) -> list[int]:
        """Tensor inputs that may be borrowed from another runner: neither static, nor already
        borrowed, nor read through the table."""
        taken = set(self.static) | set(borrowed) | set(self.indirect)
        return [i for i in self.tensors if i not in taken]


def input_roles(inputs: Sequence[Any], spec: CaptureSpec,
                input_buffers: Mapping[int, Any] | None) -> InputRoles:
    """The roles of `inputs` under `spec` (module docstring). Raises ValueError when the tensors
    are not on one CUDA device, a static input is no tensor, or a table-read input is not a tensor
    or is also static or borrowed (`input_buffers`)."""
    import torch

    device = one_cuda_device(inputs, spec.device)
    tensors = tuple(i for i, x in enumerate(inputs) if isinstance(x, torch.Tensor))
    if spec.static_input_indices is None:
        static = {i for i in tensors if isinstance(inputs[i], torch.nn.Parameter)}
    else:
        static = set(spec.static_input_indices)
    static |= set(spec.also_static)
    bad = sorted(i for i in static if i not in tensors)
    if bad:
        raise ValueError(f"static inputs {bad} are not tensor inputs")
    indirect = tuple(spec.indirect.indices) if spec.indirect is not None else ()
    bad = sorted(i for i in indirect if i not in tensors or i in static or i in (input_buffers or {}))
    if bad:
        raise ValueError(f"indirect inputs {bad} must be tensor inputs neither static nor borrowed")
    scalars = {i: x for i, x in enumerate(inputs) if not isinstance(x, torch.Tensor)}
    return InputRoles(device, tensors, tuple(sorted(static)), indirect, scalars)


def one_cuda_device(inputs: Sequence[Any], default: torch.device | None = None) -> torch.device:
    """The one CUDA device of the tensors among `inputs` (`default` when there is none), with its
    index filled in; ValueError otherwise."""
    import torch

    devices = {x.device for x in inputs if isinstance(x, torch.Tensor)}
    if not devices and default is not None:
        devices = {default}
    if len(devices) != 1 or next(iter(devices)).type != "cuda":
        raise ValueError(
            "CudaGraphRunner needs every tensor input on one CUDA device, got "
            f"{sorted(str(d) for d in devices) or 'no tensors'}"
        )
    device = next(iter(devices))
    if device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def storage_ids(xs: Iterable[Any]) -> set[int]:
    """The storages (`untyped_storage()._cdata`) of the tensors among `xs`."""
    import torch

    return {int(x.untyped_storage()._cdata) for x in xs if isinstance(x, torch.Tensor)}


def nbytes(x: object) -> int:
    """Bytes of `x`'s elements when it is a tensor, else 0."""
    import torch

    return x.numel() * x.element_size() if isinstance(x, torch.Tensor) else 0


def where(x: object) -> str:
    """`x`'s address and view, for messages: `0x7f00 [32, 64] stride [64, 1] torch.bfloat16`."""
    import torch

    if not isinstance(x, torch.Tensor):
        return f"not a tensor: {type(x).__name__}"
    return view_text(x.data_ptr(), x.shape, x.stride(), x.dtype)


def view_text(ptr: int, size: Sequence[int], stride: Sequence[int], dtype: torch.dtype) -> str:
    """An address and a view of memory, as `where` prints a tensor's."""
    return f"{ptr:#x} {list(size)} stride {list(stride)} {dtype}"


def distinct_elements(t: torch.Tensor, *like: torch.Tensor) -> list[torch.Tensor] | None:
    """`t` and each tensor of `like` (of t's shape) with t's broadcast dimensions (stride 0,
    `expand`) narrowed to one element: `t`'s view then holds distinct memory and can be written
    (`copy_`). None where t's elements may still overlap (an `as_strided` view with overlapping
    windows), which cannot be written element by element."""
    views = [t, *like]
    for d, (n, s) in enumerate(zip(t.shape, t.stride(), strict=True)):
        if s == 0 and n > 1:
            views = [v.narrow(d, 0, 1) for v in views]
    return views if _strides_nest(views[0]) else None


def _strides_nest(t: torch.Tensor) -> bool:
    """Whether no two elements of `t` share memory, shown by the usual sufficient test: with its
    dimensions in order of stride, each stride passes the span of all smaller ones (dense and
    permuted tensors, and slices of them such as q, k, v taken from one projection)."""
    span = 0
    for s, n in sorted((s, n) for n, s in zip(t.shape, t.stride(), strict=True) if n > 1):
        if s <= span:
            return False
        span += (n - 1) * s
    return True


def copy_into(dst: torch.Tensor, src: torch.Tensor) -> None:
    """`dst.copy_(src)` for a `dst` that may be broadcast (an expanded graph input or output):
    only its distinct elements are written, from the same positions of `src`. Replays copy
    inputs with it, so a `dst` without a broadcast dimension takes the plain copy at once."""
    if 0 not in dst.stride():
        dst.copy_(src)
        return
    views = distinct_elements(dst, src)
    if views is None:
        raise ValueError(f"cannot write a view whose elements overlap: size {tuple(dst.shape)}, "
                         f"stride {dst.stride()}")
    views[0].copy_(views[1])


def view_over(captured: Any, source: Any) -> Any:
    """`captured` (a graph's output over a static input's memory) as the same view of `source`'s
    storage: what the graph run on `source` returns."""
    import torch

    view = torch.empty(0, dtype=captured.dtype, device=captured.device)
    return view.set_(source.untyped_storage(), captured.storage_offset(), captured.shape, captured.stride())
