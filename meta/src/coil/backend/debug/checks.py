"""Runtime self-checks behind knobs (docs/debugging.md).

- COIL_CHECK_NAN: `check_outputs` raises when a graph output holds NaN or Inf.
- COIL_CHECK_LIFETIMES: the wrapper is emitted from `coil.wrapper_codegen.track_lifetimes(lines)`,
  whose Track lines call a `LifetimeTracker` (the wrapper's `TRACKER` global), which checks every
  Allocate/Reuse/Place/Free against the buffer lifetimes derived from the schedule (independently
  of the wrapper builder), each placed buffer's address against its arena's plan and against the
  bytes of the placed buffers still live, and, before the wrapper returns, that every allocated
  buffer was freed or is returned.

COIL_DEBUG_ASSERTS is not here: triton-codegen emits the bounds asserts
(`CodegenOptions(debug_asserts=True)`) and coil.runtime compiles such kernels in Triton's debug
mode (`KernelSpec(debug=True)`); compile.py passes the knob through.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from coil.backend.debug.dump import Span
from coil.backend.errors import CoilCheckError
from coil.wrapper_codegen import Line, Ref, Return, View

# -- NaN / Inf ------------------------------------------------------------------------------


def check_outputs(graph: str, outputs: Sequence[Any]) -> None:
    """Raise CoilCheckError naming `graph` and the first output index holding NaN or Inf."""
    for i, t in enumerate(outputs):
        if not isinstance(t, torch.Tensor) or not (t.is_floating_point() or t.is_complex()) or t.numel() == 0:
            continue
        finite = torch.isfinite(t)
        if bool(finite.all()):
            continue
        nan = int(torch.isnan(t).sum())
        inf = int(torch.isinf(t).sum())
        raise CoilCheckError(graph, f"output {i} (shape {tuple(t.shape)}, {t.dtype}) holds {nan} NaN and "
                                    f"{inf} Inf values (COIL_CHECK_NAN)")


# -- memory lifecycle -----------------------------------------------------------------------


class LifetimeTracker:
    """Checks, while the wrapper runs, that buffers live exactly as the plan says.

    Step `i` is the i-th kernel/extern call. A buffer the wrapper allocates (Allocate, or Reuse of
    a dead buffer's storage) must appear just before its writer step `first` (an extern's result:
    when its step runs) and, unless it is
    returned, be freed (Free, or handed on by Reuse) right after its last reader step `last`. An
    output written in place (`inplace` maps it to the buffer whose storage it takes) takes that
    buffer's storage just before the step that reads it for the last time and writes the output.
    A buffer placed in an arena (Place; `placed` maps it to its arena and byte offset) must sit at
    that offset of that arena and share no byte with a placed buffer still live.
    """

    def __init__(self, graph: str, spans: Sequence[Span], returned: set[str],
                 storage: dict[str, str] | None = None, placed: dict[str, tuple[str, int]] | None = None,
                 inplace: dict[str, str] | None = None) -> None:
        self.graph = graph
        self.inplace = inplace or {}
        self.spans = {s.name: s for s in spans}
        self.returned = returned
        # donor -> the buffer the reuse plan hands its storage to
        self.taker = {d: b for b, d in (storage or {}).items() if d != b}
        self.placed = placed or {}
        self.step = 0
        self.live: set[str] = set()
        self.bytes: dict[str, tuple[int, int]] = {}  # live placed buffer -> [start, end) address

    def _fail(self, message: str) -> None:
        raise CoilCheckError(self.graph, f"memory lifecycle: {message} (COIL_CHECK_LIFETIMES)")

    def begin(self) -> None:
        self.step = 0
        self.live = set()
        self.bytes = {}

    def _born(self, name: str) -> None:
        span = self.spans.get(name)
        if span is None:
            self._fail(f"{name} is allocated but the plan has no such buffer")
        elif span.first != self.step:
            self._fail(f"{name} allocated before step {self.step}, the plan says before step {span.first}")
        self.live.add(name)

    def alloc(self, name: str) -> None:
        if name in self.spans:  # an extern's unused results are not planned
            self._born(name)

    def place(self, name: str, arena: str, tensor: torch.Tensor, arena_tensor: torch.Tensor) -> None:
        planned = self.placed.get(name)
        offset = tensor.data_ptr() - arena_tensor.data_ptr()
        if planned is None:
            self._fail(f"{name} is placed in {arena} but the arena plan has no such buffer")
        elif planned != (arena, offset):
            self._fail(f"{name} is placed at byte {offset} of {arena}, the plan says byte {planned[1]} of {planned[0]}")
        start = tensor.data_ptr()
        end = start + self.spans[name].nbytes if name in self.spans else start
        for other, (lo, hi) in self.bytes.items():
            if other in self.live and lo < end and start < hi:
                self._fail(f"{name} is placed over bytes of {other}, which is live until step {self.spans[other].last}")
        self._born(name)
        self.bytes[name] = (start, end)

    def reuse(self, name: str, donor: str) -> None:
        span = self.spans.get(donor)
        if donor not in self.live or span is None:
            self._fail(f"{name} reuses {donor}, which is not live")
        elif span.output or span.last > self.step or (span.last == self.step and self.inplace.get(name) != donor):
            self._fail(f"{name} takes the storage of {donor} before step {self.step}, "
                       f"but {donor} is needed until step {span.last}")
        self.live.discard(donor)
        self._born(name)
        if donor in self.bytes:  # an output written in place holds its placed donor's bytes
            self.bytes[name] = self.bytes.pop(donor)

    def free(self, name: str) -> None:
        span = self.spans.get(name)
        if span is None:
            return  # graph inputs and extern results: not allocated by the wrapper
        if name not in self.live:
            self._fail(f"{name} freed but it is not live")
        elif span.output:
            self._fail(f"{name} freed but it is a graph output")
        elif span.last != self.step - 1:
            self._fail(f"{name} freed after step {self.step - 1}, the plan frees it after step {span.last}")
        self.live.discard(name)
        self.bytes.pop(name, None)

    def _why(self, name: str) -> str:
        if name in self.taker:
            return f"; the plan hands its storage to {self.taker[name]}, which never took it"
        if self.spans[name].last == self.spans[name].first:
            return "; no step reads it"
        return ""

    def stepped(self) -> None:
        self.step += 1

    def returning(self) -> None:
        leaked = sorted(self.live - self.returned)
        if leaked:
            detail = ", ".join(f"{b} (last needed at step {self.spans[b].last}{self._why(b)})" for b in leaked)
            self._fail(f"allocated but never freed nor returned: {detail}")


def _refs(x: Any) -> set[str]:
    if isinstance(x, Ref):
        return {x.name}
    if isinstance(x, list | tuple):
        return set().union(*(_refs(y) for y in x))
    return set()


def returned_storage(lines: Sequence[Line]) -> set[str]:
    """Buffers whose storage the wrapper returns (directly or through views)."""
    base = {ln.name: ln.base for ln in lines if isinstance(ln, View)}
    out: set[str] = set()
    for ln in lines:
        if isinstance(ln, Return):
            for name in _refs(ln.values):
                while name in base:
                    name = base[name]
                out.add(name)
    return out
