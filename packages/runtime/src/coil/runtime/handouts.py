"""Outputs a CUDA-graph runner hands out without holding them (training graphs).

A runner that kept its captured outputs alive would pin their memory in its pool for good: a
training backward captured into its forward's pool could then never reuse the memory of the
saved activations it has finished reading, and a step would hold the saved activations, the
backward's scratch memory and all gradients at once, where eager execution frees each
activation after its last use. So a runner built with `hold_outputs=False` keeps only where its
outputs live (`Slot`: the storage's address and size, the view's offset, sizes, strides, dtype)
and this record of who holds them:

* **First call.** The runner hands out the tensors the capture itself allocated (the caching
  allocator owns their memory) and keeps a weak reference to each storage
  (`torch.multiprocessing.reductions.StorageWeakRef`). When the caller drops them, the allocator
  takes their blocks back into the pool, and a graph captured later into the same pool (the
  backward) may place its own buffers there, exactly as in eager execution.
* **Replays.** A replay writes the same addresses, so the runner hands out tensors over them
  built once from the slots (`torch._C._construct_storage_from_data_pointer`: storages that do
  not own their memory; freeing them frees nothing), as new tensor objects (`detach()`) each
  call. Their use is seen through storage use counts (`coil.runtime.liveness`).

`live()` lists the outputs some caller still references, in either state; `extra_refs(k)` counts
the references to output `k`'s storage beyond the runner's own (replay state only).

**Outputs kept across calls** (`release()`, before a replay). A caller may keep what it was handed
into the next call: AccumulateGrad keeps a backward's gradient as `.grad` (gradient accumulation,
`zero_grad(set_to_none=False)`), a loop keeps the last step's activations, a caller keeps a view.
Every such holder shares the output's storage (`c10::StorageImpl`): the runner built it, or the
capture's allocation made it. `release()` copies each live storage's bytes to new memory and
swaps the two storages' memory (`UntypedStorage._swap_data_ptr_`): every holder, whatever tensor
object it holds, now reads the copy, and the graph's memory is free to overwrite. A gradient so
moved stays where it went, so accumulating into it costs one copy per optimizer step instead of
an uncaptured backward per micro-step.

A torch without `_swap_data_ptr_` (2.11) can move only the first call's outputs (storages the
allocator made reallocate in place: `resize_`). An output of a replay found kept cannot be
moved: that call runs uncaptured (and so do the calls while that tensor lives: the rest of an
accumulation step), and from then on the output is *held*: the runner keeps the tensor it hands
out until its next call, so AccumulateGrad, finding it referenced, stores a copy as `.grad`
instead of the tensor itself (one copy per optimizer step: later micro-steps add into that copy
in place). An output kept although it was handed out held (a caller that keeps it for itself)
is handed out as a clone from then on (`cloned`: one copy a call).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from coil.runtime.liveness import use_count, use_counter

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Slot:
    """Where one handed-out output lives: its storage (address, bytes) and its view of it."""

    storage_ptr: int
    storage_nbytes: int
    offset: int
    size: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype
    device: torch.device
    data_ptr: int  # the view's first element

    @staticmethod
    def of(t: torch.Tensor) -> Slot:
        st = t.untyped_storage()
        return Slot(st.data_ptr(), st.nbytes(), int(t.storage_offset()), tuple(t.shape), tuple(t.stride()), t.dtype,
                    t.device, t.data_ptr())

    def matches(self, t: torch.Tensor) -> bool:
        """Whether `t` is a tensor with exactly this slot's memory and view."""
        return (t.data_ptr() == self.data_ptr and t.stride() == self.stride and t.shape == self.size
                and t.dtype == self.dtype and t.device == self.device)


class Handouts:
    """The outputs `tensors` (index -> tensor the capture allocated) of one runner, handed out
    without being held (module docstring). The caller must drop its own references to `tensors`
    after `first()`; the object keeps none."""

    def __init__(self, tensors: Mapping[int, torch.Tensor]) -> None:
        from torch.multiprocessing.reductions import StorageWeakRef

        self.slots: dict[int, Slot] = {k: Slot.of(t) for k, t in tensors.items()}
        self._weak: dict[int, Any] | None = {
            k: StorageWeakRef(t.untyped_storage()) for k, t in tensors.items()}  # type: ignore[no-untyped-call]
        self._first_cdata = {k: int(t.untyped_storage()._cdata) for k, t in tensors.items()}
        self._bases: dict[int, torch.Tensor] = {}
        self._cdata: dict[int, int] = {}
        self._baseline: dict[int, int] = {}
        self._released: set[int] = set()  # first-call storages whose holders were moved to copies
        self.evacuated = 0  # storages copied away by `release()` so far (tests, logs)
        self.held: set[int] = set()  # outputs the runner holds until its next call (module docstring)
        self.cloned: set[int] = set()  # outputs handed out as clones: kept although held
        self._holding: list[torch.Tensor] = []  # the held outputs' last hand-out
        self._handed_held: set[int] = set()  # outputs whose last hand-out was held
        # no output referenced since the last check: none can be again before the next hand-out
        # (only `replayed` makes tensors over the slots), so `live` need not count again; a pool's
        # every replay checks its other members, and most are dead (read directly on that path)
        self.dead = False
        self.dead_outputs: set[int] = set()  # the same, output by output (`live_among`)
        # hand-outs over the slots so far: an output found dead stays dead while this is unchanged
        # (`PoolGuard.conflict` skips a member whose outputs it found dead at this generation)
        self.generation = 0

    def release(self) -> str | None:
        """Move every holder of a live output onto a copy of its memory (module docstring,
        "Outputs kept across calls"): None when no output is referenced any more, else why not.
        An output that could not be moved is held from then on, or cloned if the tensor kept was
        handed out held (module docstring)."""
        import torch

        live = self.live()
        if not live:
            return None
        moved: set[int] = set()
        stuck: list[int] = []
        for k in live:
            c = self._storage_cdata(k)
            if c in moved:
                continue
            if self._weak is None:
                storage = self._bases[k].untyped_storage()
            else:
                storage = torch.UntypedStorage._new_with_weak_ptr(self._weak[k].cdata)  # type: ignore[attr-defined]
            if _move_memory(storage, allocated=self._weak is not None):
                moved.add(c)
            else:
                stuck.append(k)
            del storage
        if moved and self._weak is None:
            self._over_slots()  # the runner's own storages now hold the copies: new ones over the slots
        self._released |= moved
        self.evacuated += len(moved)
        if not stuck:
            return None
        # held or cloned alone: a clone cannot keep two outputs' aliasing, nor a copy .grad makes;
        # cloned only when the tensor kept was handed out held (a tensor kept from before holding
        # began, a .grad taken then, says nothing about holding)
        alone = [k for k in stuck if sum(s.storage_ptr == self.slots[k].storage_ptr for s in self.slots.values()) == 1]
        self.cloned.update(k for k in alone if k in self._handed_held)
        self.held.update(alone)
        return (f"outputs {stuck} are still referenced and this torch cannot move a storage's holders "
                f"(no UntypedStorage._swap_data_ptr_); held from now on: {sorted(self.held - self.cloned)}, "
                f"cloned: {sorted(self.cloned)}")

    def _storage_cdata(self, k: int) -> int:
        """The storage identity (`_cdata`) of output `k`'s memory, in either state."""
        return self._first_cdata[k] if self._weak is not None else self._cdata[k]

    @property
    def replaying(self) -> bool:
        """True once the handouts are tensors over the slots (after the first replay)."""
        return self._weak is None

    def live(self) -> list[int]:
        """Indices of outputs whose memory a caller still references (the runner first lets go
        of the outputs it held since its last call)."""
        self._holding = []
        if self.dead:
            return []
        live = self._referenced()
        self.dead = not live
        return live

    def live_among(self, indices: frozenset[int] | set[int] | Sequence[int]) -> list[int]:
        """`live()` asked of `indices` alone (each an output of this runner), in index order: a
        pool member's replay checks only the outputs of earlier members it did not keep clear
        of, and counting every output of every earlier member made each replay's check grow with
        the pool. An output found dead is not counted again before the next hand-out (as `dead`);
        a set of indices skips those without a Python step each."""
        if self._holding:
            self._holding = []
        if self.dead:
            return []
        dead = self.dead_outputs
        todo = indices - dead if isinstance(indices, (frozenset, set)) else [k for k in indices if k not in dead]
        if not todo:
            return []
        live = []
        replaying = self._weak is None
        cdata, baseline, count = self._cdata, self._baseline, use_counter()  # `_is_referenced`, inlined
        for k in sorted(todo):
            if count(cdata[k]) > baseline[cdata[k]] if replaying else self._is_referenced(k):
                live.append(k)
            else:
                dead.add(k)
        if len(dead) == len(self.slots):
            self.dead = True
        return live

    def in_use(self) -> bool:
        """Whether a caller may still reference an output's memory; unlike `live`, the outputs the
        runner holds since its last call count (it keeps them), so the answer errs toward True."""
        return not self.dead and bool(self._referenced())

    def _referenced(self) -> list[int]:
        """Indices of outputs whose memory something beyond the runner references now (those
        `live_among` found dead since the last hand-out are not counted again)."""
        dead = self.dead_outputs
        if self._weak is not None:
            return [k for k in self.slots if k not in dead and self._is_referenced(k)]
        cdata, baseline, count = self._cdata, self._baseline, use_counter()  # `_is_referenced`, inlined
        return [k for k, c in cdata.items() if k not in dead and count(c) > baseline[c]]

    def _is_referenced(self, k: int) -> bool:
        """Whether something beyond the runner references output `k`'s memory now."""
        if self._weak is not None:
            return not self._weak[k].expired() and self._first_cdata[k] not in self._released
        c = self._cdata[k]
        return use_count(c) > self._baseline[c]

    def extra_refs(self, k: int) -> int | None:
        """References to output `k`'s storage beyond the runner's own (None before replays; the
        outputs it held since its last call let go of first, as in `live`)."""
        if self._holding:
            self._holding = []
        if self._weak is not None:
            return None
        c = self._cdata[k]
        return use_counter()(c) - self._baseline[c]

    def replayed(self) -> dict[int, torch.Tensor]:
        """New tensor objects over the slots, for the outputs of a replay that just ran. The
        first-call tensors must all be dead (`live()` empty) before the replay."""
        if self._weak is not None:
            self._weak = None
            self._over_slots()
        self.dead = False
        self.dead_outputs = set()
        self.generation += 1
        if not (self.held or self.cloned):  # the usual case: new tensor objects, nothing kept
            return {k: b.detach() for k, b in self._bases.items()}
        out = {k: b.clone() if k in self.cloned else b.detach() for k, b in self._bases.items()}
        self._handed_held = self.held - self.cloned
        self._holding = [out[k] for k in self._handed_held]
        return out

    def _over_slots(self) -> None:
        """The runner's own tensors over the slots, and their storages' use counts now."""
        self._bases = _tensors_over(self.slots)
        self._cdata = {k: int(b.untyped_storage()._cdata) for k, b in self._bases.items()}
        self._baseline = {c: use_count(c) for c in set(self._cdata.values())}


def can_swap(storage: Any) -> bool:
    """Whether this torch can swap two storages' memory (`UntypedStorage._swap_data_ptr_`)."""
    return hasattr(storage, "_swap_data_ptr_")


def _move_memory(storage: Any, allocated: bool) -> bool:
    """Give `storage` new memory holding its bytes (the caching allocator, the current stream), so
    that every tensor over it, whoever holds it, reads the copy; whether that could be done.

    Where torch has `UntypedStorage._swap_data_ptr_`, a fresh copy's memory and the storage's are
    swapped and the copy's storage, which then holds the old memory, is dropped (freeing it as a
    holder dropping its last tensor would). Otherwise a storage the allocator made (`allocated`:
    the capture's own outputs) is resized to its own size, which reallocates and copies in place
    of its memory; the storages the runner builds over its slots cannot be moved so."""
    import torch

    if can_swap(storage):
        nbytes = storage.nbytes()
        with torch.no_grad():
            copy = torch.empty(nbytes, dtype=torch.uint8, device=storage.device)
            copy.copy_(torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage, 0, (nbytes,), (1,)))
            storage._swap_data_ptr_(copy.untyped_storage())
        return True
    if not (allocated and storage.resizable()):
        return False
    before = storage.data_ptr()
    storage.resize_(storage.nbytes())
    return bool(storage.data_ptr() != before)


def _tensors_over(slots: Mapping[int, Slot]) -> dict[int, torch.Tensor]:
    """Tensors over the slots' memory, on storages that do not own it (one per distinct storage,
    so outputs that shared a storage share one again)."""
    import torch

    storages: dict[int, Any] = {}
    out: dict[int, torch.Tensor] = {}
    with torch.no_grad():
        for k, s in slots.items():
            if s.storage_ptr not in storages:
                storages[s.storage_ptr] = torch._C._construct_storage_from_data_pointer(
                    s.storage_ptr, s.device, s.storage_nbytes)
            base = torch.empty((), dtype=s.dtype, device=s.device)
            base.set_(storages[s.storage_ptr], s.offset, s.size, s.stride)
            out[k] = base
    return out
