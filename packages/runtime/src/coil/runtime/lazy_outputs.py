"""Outputs handed out uncloned, and copied away only when a replay would overwrite them in use.

An inference CUDA graph's outputs live in the graph's memory, which the next replay overwrites.
Cloning every output after every replay keeps what a caller holds safe, at the cost of one copy
of all outputs per call, in time and in memory (a second copy of the logits held at the peak).
Most callers drop the outputs before the next call (a benchmark loop, `generate`, an evaluation
step that keeps `argmax` only), so the copy is wasted. `LazyOutputs` pays it only when needed:

* `hand_out()`, after a replay: new tensor objects over the graph's static outputs (one per
  output; outputs that shared a storage share it again), remembered by weak reference.
* `free()`, before the next replay: for each static output storage still referenced beyond the
  runner's own references (storage use counts, `coil.runtime.liveness`), if every extra
  reference is one of the last call's handed-out tensors, that storage is copied to new memory
  (the caching allocator, the current stream) and each of those tensors is moved onto the copy
  (`Tensor.set_`, same offset, sizes and strides): the caller's tensors keep their values and
  their aliasing; only their `data_ptr()` changes. The graph's memory is then free to overwrite.
  If some extra reference is anything else (a view or `detach()` the caller made, a storage
  object), the tensors holding it cannot be found and moved: `free()` moves nothing, returns
  why, and turns itself off (`enabled` False); the runner then runs that call uncaptured and
  clones from then on.
* `resized()`: a holder that grew a handed-out tensor (`resize_`, `out=`) reallocated the storage
  it shares with the runner's static output, which then no longer holds the graph's memory; the
  runner stops replaying (as when a static input moves).

The first call's outputs are handed out the same way (the runner copies the warm-up result into
the static outputs). Before copying anything away the runner runs `gc.collect()` once: outputs
kept only by a reference cycle (a model's output object) are not in use.

A caller that keeps the previous call's outputs (`out = model(x)` in a loop keeps the old `out`
during the call that replaces it) pays one copy of what it keeps, as cloning did; a caller that
drops them pays nothing. The rule is the liveness rule of `coil.runtime.cudagraph` with a remedy
instead of an uncaptured call.

Streams: the copy and the replay run on the calling stream. Work a caller queued on another
stream that reads an output must be ordered before the next call (`wait_stream`, an event), as
for memory the caching allocator may hand out again; cloning did not need that.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from coil.runtime.graph_inputs import copy_into, distinct_elements
from coil.runtime.liveness import StorageLiveness

if TYPE_CHECKING:
    import torch


class LazyOutputs:
    """The static outputs `outputs` (output index -> tensor in the graph's memory, held by the
    runner for its life) handed out uncloned under the rule of the module docstring.

    The use count of each storage right now is the baseline: build this after the runner holds
    its references and before anything is handed out.
    """

    def __init__(self, outputs: Mapping[int, torch.Tensor]) -> None:
        self._views: dict[int, tuple[int, int, tuple[int, ...], tuple[int, ...], torch.dtype, torch.device]] = {}
        self._storages: dict[int, Any] = {}  # storage _cdata -> an UntypedStorage object over it
        for k, t in outputs.items():
            st = t.untyped_storage()
            cdata = int(st._cdata)
            self._storages.setdefault(cdata, st)
            self._views[k] = (cdata, int(t.storage_offset()), tuple(t.shape), tuple(t.stride()), t.dtype, t.device)
            del st
        self._liveness = StorageLiveness(outputs.values())  # after the storage objects above: counted
        self._addresses = {c: st.data_ptr() for c, st in self._storages.items()}
        self._handed: dict[int, list[weakref.ref[torch.Tensor]]] = {}  # per storage, the last call's tensors
        self.enabled = True
        self.evacuated = 0  # storages copied away so far (tests, logs)

    @property
    def indices(self) -> tuple[int, ...]:
        """The output indices handed out uncloned."""
        return tuple(self._views)

    def hand_out(self) -> dict[int, torch.Tensor]:
        """New tensors over the static outputs, for the outputs of a replay that just ran (after a
        `free()` that returned None)."""
        import torch

        out: dict[int, torch.Tensor] = {}
        handed: dict[int, list[weakref.ref[torch.Tensor]]] = {}
        with torch.no_grad():
            for k, (cdata, offset, size, stride, dtype, device) in self._views.items():
                t = torch.empty(0, dtype=dtype, device=device).set_(self._storages[cdata], offset, size, stride)
                handed.setdefault(cdata, []).append(weakref.ref(t))
                out[k] = t
        self._handed = handed
        return out

    def adopt(self, first: tuple[Any, ...]) -> tuple[Any, ...]:
        """The first call's outputs handed out as a replay's are: `first` (the warm-up result, in
        the runner's output order) is copied into the static outputs and the returned tuple holds
        hand-outs over them in its place, so the warm-up's memory, outside the graph's pool, is
        freed once the caller's reference to `first` goes (a first result kept by a reference
        cycle, a model's output object, would otherwise hold a second copy of the outputs until
        a full collection). Outputs whose elements overlap beyond broadcasting cannot take the
        copy: then `first` is returned unchanged."""
        import torch

        handed = self.hand_out()
        if any(distinct_elements(t) is None for t in handed.values()):
            self._handed = {}
            return first
        with torch.no_grad():
            for k, t in handed.items():
                copy_into(t, first[k])
        return tuple(handed.get(k, o) for k, o in enumerate(first))

    def held(self) -> bool:
        """Whether some static output storage is referenced beyond the runner's own references
        (what `free()` would copy away or refuse)."""
        return any(self._liveness.extra(c) > 0 for c in self._storages)

    def resized(self) -> bool:
        """Whether a holder resized a handed-out tensor past its storage (`resize_`, an `out=`
        argument of another shape): the storage, shared with the runner's static output, then
        holds new memory, no longer the graph's, and the runner must stop replaying."""
        return any(st.data_ptr() != self._addresses[c] for c, st in self._storages.items())

    def free(self, collect: Callable[[], object] | None = None) -> str | None:
        """Make the static outputs free to overwrite: None when they are (copying away, first,
        the storages that only the last call's handed-out tensors still reference); else why not,
        with nothing moved. The first refusal turns handing out off (`enabled` False: the runner
        clones from then on); later calls are refused only while those references last.
        `collect`, when given, runs before anything is moved or refused, and only if some storage
        is still referenced (the runner's one `gc.collect()`: references held only by a cycle
        then go); the storages are counted again after it."""
        held = {c: n for c in self._storages if (n := self._liveness.extra(c)) > 0}
        if held and collect is not None:
            collect()
            held = {c: n for c in held if (n := self._liveness.extra(c)) > 0}
        moves: list[tuple[int, list[torch.Tensor]]] = []
        for cdata, extra in held.items():
            if not self.enabled:
                return "an output handed out earlier is still referenced through a view or detach() of it"
            live = [t for t in (w() for w in self._handed.get(cdata, ())) if t is not None
                    and int(t.untyped_storage()._cdata) == cdata]
            if len(live) != extra:
                self.enabled = False
                return (f"{extra - len(live)} reference(s) to an output's memory that are not the tensors the "
                        "runner handed out (a view or a detach() of one); outputs are cloned from now on")
            moves.append((cdata, live))
        for cdata, live in moves:
            self._move(cdata, live)
        return None

    def _move(self, cdata: int, tensors: list[torch.Tensor]) -> None:
        """Copy storage `cdata` to new memory and put `tensors` (every tensor over it but the
        runner's own) onto the copy, views unchanged."""
        import torch

        src = self._storages[cdata]
        nbytes = src.nbytes()
        device = tensors[0].device
        inference = any(t.is_inference() for t in tensors)
        with torch.inference_mode() if inference else torch.no_grad():
            copy = torch.empty(nbytes, dtype=torch.uint8, device=device)
            copy.copy_(torch.empty(0, dtype=torch.uint8, device=device).set_(src, 0, (nbytes,), (1,)))
            dst = copy.untyped_storage()
            for t in tensors:
                t.set_(dst, t.storage_offset(), t.shape, t.stride())
        self.evacuated += 1


def lazy_outputs_of(outputs: Sequence[Any], static_inputs: Sequence[Any], held: Iterable[int]) -> LazyOutputs | None:
    """The outputs of a runner with `lazy_clones` to hand out uncloned, or None when there is none.

    Not: outputs handed out under `static_outputs` (`held`), outputs over an input's memory (a
    parameter, a copied input's buffer: cloned), and outputs a plain tensor over their storage
    would misread (a lazy conjugate or negative bit, a subclass, a non-strided layout)."""
    import torch

    inputs = {int(x.untyped_storage()._cdata) for x in static_inputs if isinstance(x, torch.Tensor)}
    skip = set(held)
    chosen = {k: o for k, o in enumerate(outputs)
              if type(o) is torch.Tensor and k not in skip and o.layout == torch.strided and not o.is_conj()
              and not o.is_neg() and int(o.untyped_storage()._cdata) not in inputs}
    return LazyOutputs(chosen) if chosen else None
