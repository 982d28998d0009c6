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
try:  # torch's C fast path for a view with given sizes and strides (~1.6 us vs ~7.6 us for as_strided)
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


def fast_empty(device: torch.device):  # type: ignore[no-untyped-def]
    """`alloc(size, stride, dtype)` for `device`: torch's C fast path where it is safe (the CPU;
    CUDA when the process sees one GPU, since the fast path allocates on the current device),
    else `torch.empty_strided(..., device=device)`."""
    if device.type == "cpu" and _empty_strided_cpu is not None:
        return _empty_strided_cpu
    if device.type == "cuda" and _empty_strided_cuda is not None and torch.cuda.device_count() == 1:
        return _empty_strided_cuda

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
