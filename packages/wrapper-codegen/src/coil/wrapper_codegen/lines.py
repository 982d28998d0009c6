"""The Wrapper IR: structured lines only (no raw source), so every emitter covers every line.

`Ref(name)` marks a variable inside argument trees; everything else in them is a literal
(numbers, bools, None, torch.dtype, torch.device, lists/tuples of those) or a sympy expression
over size symbols (dynamic shapes), which emitters print as integer arithmetic (a relation
between sizes, the condition of a run-time assert, prints as a bool).
Sizes, strides, offsets and grids are ints or sympy expressions (typed Any below).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class Ref:
    """A wrapper variable used as an argument."""

    name: str


@dataclass(frozen=True)
class Unpack:
    """Bind the graph inputs: names[i] = args[i] (None: unused); the list is then cleared."""

    names: tuple[str | None, ...]


@dataclass(frozen=True)
class SizeOf:
    """Bind size symbol `name` to `tensor.size(dim)` (a symbol seen only in an input's shape)."""

    name: str
    tensor: str
    dim: int


@dataclass(frozen=True)
class CheckInput:
    """Raise ValueError unless graph input `index` (bound to `name`) is a tensor of this size,
    dtype and device, with these strides on every dim longer than 1 (what the kernels assume).

    Sizes and strides may be size expressions over symbols bound before (Unpack, SizeOf).
    """

    name: str
    index: int
    size: tuple[Any, ...]
    stride: tuple[Any, ...]
    dtype: torch.dtype
    device: torch.device


@dataclass(frozen=True)
class Allocate:
    """name = a new uninitialised tensor."""

    name: str
    size: tuple[Any, ...]
    stride: tuple[Any, ...]
    dtype: torch.dtype
    device: torch.device


@dataclass(frozen=True)
class Reuse:
    """name takes over the storage of `donor` (same bytes), seen with its own size/stride."""

    name: str
    donor: str
    size: tuple[Any, ...]
    stride: tuple[Any, ...]


@dataclass(frozen=True)
class Arena:
    """name = `nbytes` uninitialised bytes on `device`, also bound as one typed alias per dtype of
    `dtypes` (`arena_view(name, dtype)`), from which Place lines take buffers. `nbytes` is a
    multiple of every dtype's item size. Freed by a Free of each alias and of `name`."""

    name: str
    nbytes: int
    device: torch.device
    dtypes: tuple[torch.dtype, ...]


def arena_view(arena: str, dtype: torch.dtype) -> str:
    """The variable holding arena `arena` seen as `dtype` (bound by its Arena line)."""
    return f"{arena}_{str(dtype).removeprefix('torch.')}"


@dataclass(frozen=True)
class Place:
    """name = the bytes of `arena` from `offset` (a multiple of the dtype's item size) seen as a
    `dtype` tensor of this size and stride: a buffer at the offset the memory plan packed it at."""

    name: str
    arena: str
    offset: int
    size: tuple[Any, ...]
    stride: tuple[Any, ...]
    dtype: torch.dtype


@dataclass(frozen=True)
class Free:
    """Drop the wrapper's reference to `name`."""

    name: str


@dataclass(frozen=True)
class View:
    """name = `base` reinterpreted (as_strided; offset relative to base's own offset)."""

    name: str
    base: str
    size: tuple[Any, ...]
    stride: tuple[Any, ...]
    offset: Any


@dataclass(frozen=True)
class KernelCall:
    """Launch a generated Triton kernel on `grid` programs."""

    kernel: str
    grid: tuple[Any, ...]
    args: tuple[str, ...]
    sizes: tuple[Any, ...]


# what BindSymbol reads of its source
BIND_ATTRS = ("value", "int", "size", "stride", "storage_offset")


@dataclass(frozen=True)
class BindSymbol:
    """Bind size symbol `name` to a value read from wrapper variable `source`: `attr` "value"
    (`source` itself), "int" (`int(source)`, a bool as 0/1), "size" or "stride" (`source.size(dim)`,
    `source.stride(dim)`) or "storage_offset" (`source.storage_offset()`), divided exactly by
    `divisor`. The data-dependent sizes an extern's results determine (unbacked symbols)."""

    name: str
    source: str
    attr: str
    dim: int = 0
    divisor: int = 1

    def __post_init__(self) -> None:
        if self.attr not in BIND_ATTRS:
            raise ValueError(f"BindSymbol({self.name!r}): attr {self.attr!r} is none of {BIND_ATTRS}")


@dataclass(frozen=True)
class ExternCall:
    """results = op(*args, **kwargs). `results` mirrors the op's return (names or None; a scalar
    result is a name too). `binds` then bind the size symbols the results determine, before the
    `expect` layouts (which may use them) are enforced."""

    op: str
    args: tuple[Any, ...]
    kwargs: tuple[tuple[str, Any], ...]
    results: Any
    expect: tuple[tuple[str, tuple[Any, ...], tuple[Any, ...]], ...]  # (name, size, stride) to enforce
    binds: tuple[BindSymbol, ...] = ()


@dataclass(frozen=True)
class Return:
    """Return these values (Refs or literals) as a tuple."""

    values: tuple[Any, ...]


# The wrapper module's global that Track lines report to; whoever loads the wrapper binds it.
TRACKER = "_coil_track"
# Track events and how many names each takes.
TRACK_EVENTS = {"begin": 0, "alloc": 1, "reuse": 2, "place": 2, "free": 1, "stepped": 0, "returning": 0}


@dataclass(frozen=True)
class Track:
    """Report a buffer-lifetime event to the tracker: `TRACKER.<event>(*names)`, names as strings.

    Events: `begin()` (the inputs are bound), `alloc(name)` (a buffer now exists), `reuse(name,
    donor)` (name took donor's storage), `place(name, arena)` (name was placed in the arena; the
    emitters pass the two tensors after the names: `place(name, arena, <name>, <arena>)`), `free(name)` (just before its Free), `stepped()` (a kernel
    or extern call ran), `returning()` (just before Return). `tracking.track_lifetimes` inserts
    them; a program without them needs no tracker. ValueError for another event or name count.
    """

    event: str
    names: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if TRACK_EVENTS.get(self.event) != len(self.names):
            raise ValueError(f"Track({self.event!r}, {self.names!r}): events and their names are {TRACK_EVENTS}")


Line = Unpack | SizeOf | CheckInput | Allocate | Arena | Place | Reuse | Free | View | KernelCall | ExternCall | Return | Track
