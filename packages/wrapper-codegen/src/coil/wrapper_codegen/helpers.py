# The run-time helpers of coil's generated wrappers. emit_python copies this file's text into
# every Python wrapper as its prelude (so a wrapper imports nothing but torch); emit_fx's nodes
# call these same functions. Keep it self-contained: torch and builtins only.
import torch

empty_strided = torch.empty_strided
as_strided = torch.as_strided
try:  # torch's C fast paths for an uninitialised allocation (what Inductor's wrappers call)
    from torch._C._dynamo.guards import _empty_strided_cpu, _empty_strided_cuda  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - older or trimmed torch builds
    _empty_strided_cpu = _empty_strided_cuda = None
try:  # torch's C fast path for a view with given sizes and strides (several times cheaper than as_strided)
    from torch._C._dynamo.guards import _reinterpret_tensor  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - older or trimmed torch builds
    _reinterpret_tensor = None


def reinterpret(base: torch.Tensor, size: tuple[int, ...], stride: tuple[int, ...], offset: int) -> torch.Tensor:
    """`base`'s storage seen with `size` and `stride`, starting `offset` elements after `base`'s own
    storage offset (a wrapper-internal alias: no autograd view tracking, as the wrapper runs
    outside autograd)."""
    if _reinterpret_tensor is not None:
        return _reinterpret_tensor(base, size, stride, offset)  # type: ignore[no-any-return]
    return torch.as_strided(base, size, stride, base.storage_offset() + offset)


# the current CUDA device's index: torch's C getter where the build has it
_current_cuda_device = getattr(torch._C, "_cuda_getDevice", None) or torch.cuda.current_device


def fast_empty(device: torch.device):  # type: ignore[no-untyped-def]
    """`alloc(size, stride, dtype)` for `device`: torch's C fast path where it is safe, else
    `torch.empty_strided(..., device=device)`. The CUDA fast path allocates on the current device:
    taken as it is when the process sees one GPU (or `device` names no index); with several (a
    torchrun rank sees every GPU) each allocation first checks that the current device is
    `device`, a check far cheaper than the slow path."""
    if device.type == "cpu" and _empty_strided_cpu is not None:
        return _empty_strided_cpu
    fast = _empty_strided_cuda
    if device.type == "cuda" and fast is not None:
        if device.index is None or torch.cuda.device_count() == 1:
            return fast
        index, current = device.index, _current_cuda_device

        def alloc_checked(size: tuple[int, ...], stride: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
            if current() == index:
                return fast(size, stride, dtype)  # type: ignore[no-any-return]
            return torch.empty_strided(size, stride, dtype=dtype, device=device)

        return alloc_checked

    def alloc(size: tuple[int, ...], stride: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        return torch.empty_strided(size, stride, dtype=dtype, device=device)

    return alloc


def ensure_layout(t: torch.Tensor, size: tuple[int, ...], stride: tuple[int, ...]) -> torch.Tensor:
    """An ATen fallback result laid out as coil planned (copied only when it is not)."""
    if tuple(t.shape) == size and (t.numel() <= 1 or tuple(t.stride()) == stride):
        return t
    out = torch.empty_strided(size, stride, dtype=t.dtype, device=t.device)
    out.copy_(t)
    return out


def check_input(t: object, index: int, size: tuple[int, ...], stride: tuple[int, ...], dtype: torch.dtype,
                device: torch.device) -> None:
    """Raise ValueError unless graph input `index` is a tensor of this shape, dtype and device whose
    strides agree on every dim longer than 1 (the kernels were generated for that layout)."""
    if (isinstance(t, torch.Tensor) and t.dtype == dtype and t.shape == size
            and t.device.type == device.type and (device.index is None or t.device.index == device.index)
            and all(n <= 1 or got == want for n, got, want in zip(size, t.stride(), stride, strict=True))):
        return
    got = (f"shape {tuple(t.shape)}, stride {t.stride()}, {t.dtype} on {t.device}"
           if isinstance(t, torch.Tensor) else f"a {type(t).__name__}")
    raise ValueError(f"coil: graph input {index} is not what this graph was compiled for: expected shape "
                     f"{size}, stride {stride}, {dtype} on {device}; got {got}")


class PointerTable:
    """The addresses of the graph inputs that kernels read through a table (wrapper-codegen's
    `plan_indirect`): `inputs` maps a graph input index to (slot, size, stride, dtype).

    `prepare(args)` returns the table (an int64 tensor on `device`, made at the first call: a
    wrapper is made while a graph compiles, possibly under a fake-tensor mode) after writing each
    such input's address into its slot: one host-to-device copy from pageable memory on the
    current stream, so it is staged before the call returns and ordered before the kernels that
    read it. An input that is not 16-byte aligned, or not laid out as the kernels assume, is
    first copied into a tensor that is (and replaces it in `args`); one of another shape, dtype
    or device raises ValueError. While the current stream is being captured into a CUDA graph it
    writes nothing: the graph bakes in the table's address, and whoever replays the graph calls
    `prepare` with that replay's inputs first (coil.runtime's CUDA-graph runner does)."""

    ALIGN = 16

    def __init__(self, device: torch.device, inputs: dict[int, tuple[int, tuple[int, ...], tuple[int, ...],
                                                                     torch.dtype]]) -> None:
        self.device = torch.device(device)
        self.inputs = inputs
        self.indices = tuple(sorted(inputs))
        self.layouts = {i: (size, stride, dtype) for i, (_, size, stride, dtype) in inputs.items()}
        self.slots = max(s for s, _, _, _ in inputs.values()) + 1
        self.table: torch.Tensor | None = None

    def prepare(self, args: list) -> torch.Tensor:  # type: ignore[type-arg]
        """The table, holding the addresses of `args`' table-read inputs (class docstring)."""
        cuda = self.device.type == "cuda"
        if self.table is None:
            self.table = torch.zeros(self.slots, dtype=torch.int64, device=self.device)
        if cuda and torch.cuda.is_current_stream_capturing():
            return self.table
        ptrs = [0] * self.slots
        for i, (slot, size, stride, dtype) in self.inputs.items():
            x = args[i]
            if not (isinstance(x, torch.Tensor) and x.dtype == dtype and tuple(x.shape) == size
                    and x.device == self.table.device):
                check_input(x, i, size, stride, dtype, self.table.device)  # raises, naming the input
            if x.data_ptr() % self.ALIGN or any(n > 1 and s != t for n, s, t in zip(size, x.stride(), stride,
                                                                                   strict=True)):
                y = torch.empty_strided(size, stride, dtype=dtype, device=self.table.device)
                y.copy_(x)
                args[i] = x = y
            ptrs[slot] = x.data_ptr()
        self.table.copy_(torch.tensor(ptrs, dtype=torch.int64), non_blocking=cuda)
        return self.table
