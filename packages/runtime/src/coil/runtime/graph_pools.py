"""Runners that share memory: who lends its static outputs, and who captured into which pool.

A runner that borrows another's static outputs (a training backward reading its forward's saved
activations) reads them in place and captures into the lender's memory pool ("Shared pools" in
`coil.runtime.cudagraph`). This module keeps the two registries that rule needs, weakly:

* `OWNERS`: runners whose static outputs are handed out uncloned (`ReplayPolicy.static_outputs`),
  which `borrowed_inputs` searches for a copied input's memory;
* `POOL_MEMBERS`: the runners of each memory pool in capture order, which the liveness checks
  walk (a replay must not overwrite what a runner captured later in the pool handed out).

`open_to_captures(pool)` says whether a runner that does not hold its outputs may capture into a
pool now: not while a member that has replayed still has outputs in use, since those lie in
memory the caching allocator counts as free. Such a runner then takes a new pool and borrows
nothing from that pool's runners.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from coil.runtime.cudagraph import CudaGraphRunner
    from coil.runtime.graph_inputs import InputRoles

OWNERS: weakref.WeakSet[CudaGraphRunner] = weakref.WeakSet()
POOL_MEMBERS: dict[Any, list[weakref.ref[CudaGraphRunner]]] = {}


def open_to_captures(pool: Any) -> bool:
    """Whether a runner that does not hold its outputs may capture into `pool` now: no member
    that has replayed has outputs still in use. A replay's outputs lie in memory the caching
    allocator counts as free (the first call's tensors were freed once consumed), so a capture
    could place its buffers over them."""
    for ref in POOL_MEMBERS.get(pool, ()):
        other = ref()
        if other is not None and other.handouts is not None and other.handouts.replaying \
                and other.handouts.in_use():
            return False
    return True


def join_pool(runner: CudaGraphRunner, pool: Any) -> int:
    """Record `runner` as the latest capture in `pool`; its position there (members are only
    ever appended, so it stays)."""
    members = POOL_MEMBERS.setdefault(pool, [])
    members.append(weakref.ref(runner))
    return len(members) - 1


def earlier_members(runner: CudaGraphRunner, pool: Any) -> Iterator[weakref.ref[CudaGraphRunner]]:
    """References to the runners captured into `pool` before `runner`."""
    for ref in POOL_MEMBERS.get(pool, ()):
        if ref() is runner:
            return
        yield ref


def later_members(pool: Any, position: int) -> Iterator[CudaGraphRunner]:
    """The live runners captured into `pool` after the one at `position` (`join_pool`'s)."""
    members = POOL_MEMBERS.get(pool, ())
    for k in range(position + 1, len(members)):
        other = members[k]()
        if other is not None:
            yield other


def owned_static_output(x: torch.Tensor, hold_outputs: bool = True
                        ) -> tuple[CudaGraphRunner, torch.Tensor | None, int] | None:
    """The live runner whose handed-out output `x` is, that output (None for a runner that does
    not hold its outputs) and its index; or None. With `hold_outputs=False` only runners of that
    mode whose outputs are still the capture's own tensors lend."""
    for owner in list(OWNERS):
        if owner.hold_outputs != hold_outputs:
            continue
        if owner.handouts is not None:
            if owner.handouts.replaying:
                continue
            for k, slot in owner.handouts.slots.items():
                if slot.matches(x):
                    return owner, None, k
            continue
        for k in owner._alias_idx:
            t = owner._static_outputs[k]
            if (t.data_ptr() == x.data_ptr() and t.shape == x.shape and t.stride() == x.stride()
                    and t.dtype == x.dtype and t.device == x.device):
                return owner, t, k
    return None


def borrowed_inputs(inputs: Sequence[Any], roles: InputRoles, given: Mapping[int, Any], hold_outputs: bool
                    ) -> tuple[dict[int, Any], dict[int, tuple[CudaGraphRunner, int]], CudaGraphRunner | None]:
    """`given` (input index -> static buffer) plus the copied inputs that are a live runner's
    handed-out outputs, all from one lender's pool; the lent ones (`hold_outputs=False`: input
    index -> (lender, its output index)); and the lender (None when nothing was found)."""
    borrowed = dict(given)
    lent: dict[int, tuple[CudaGraphRunner, int]] = {}
    lender: CudaGraphRunner | None = None
    for i in roles.copy_candidates(borrowed):
        found = owned_static_output(inputs[i], hold_outputs)
        if found is not None and not (hold_outputs or open_to_captures(found[0]._pool)):
            found = None  # closed to captures (open_to_captures): this runner takes a new pool
        if found is not None and (lender is None or found[0]._pool == lender._pool):
            lender = lender or found[0]
            borrowed[i] = found[1] if found[1] is not None else inputs[i]
            if not hold_outputs:
                lent[i] = (found[0], found[2])
        del found
    return borrowed, lent, lender


class PoolGuard:
    """The checks a runner that does not hold its outputs (`hold_outputs=False`) makes before
    each replay, against the runners captured before it in its pool ("Handed-out outputs" in
    `coil.runtime.cudagraph`). Built right after the capture.

    * `consumed`: the borrowed inputs whose memory the capture reused (their lender's first-call
      tensors were referenced by the capture alone), grouped by the lender's storage; each must
      be referenced by the call's input list alone, since the replay overwrites it after reading.
    * The outputs of earlier members that were referenced at capture were kept out of this
      runner's memory; any other of their outputs must be unreferenced now.
    """

    def __init__(self, runner: CudaGraphRunner, pool: Any, lent: Mapping[int, tuple[CudaGraphRunner, int]]) -> None:
        self.consumed: tuple[int, ...] = tuple(i for i, (lender, k) in sorted(lent.items())
                                               if lender.handouts is None or k not in lender.handouts.live())
        groups: dict[int, tuple[CudaGraphRunner, int, list[int]]] = {}
        for i in self.consumed:
            lender, k = lent[i]
            assert lender.handouts is not None
            groups.setdefault(lender.handouts.slots[k].storage_ptr, (lender, k, []))[2].append(i)
        self._groups = [(ptr, lender, k, tuple(idx)) for ptr, (lender, k, idx) in groups.items()]
        # per earlier member, the outputs not referenced at capture (this runner's buffers may lie
        # over them): only those are checked before a replay
        # (a set: `Handouts.live_among` skips the outputs already found dead in one step), and the
        # member's hand-out generation at which all of them were last found dead
        self._exposed: list[tuple[weakref.ref[CudaGraphRunner], frozenset[int]]] = []
        for ref in earlier_members(runner, pool):
            other = ref()
            if other is not None and other.handouts is not None:
                protected = set(other.handouts.live())
                exposed = frozenset(k for k in other.handouts.slots if k not in protected)
                if exposed:
                    self._exposed.append((ref, exposed))
        self._clear_at: list[int] = [-1] * len(self._exposed)

    def conflict(self, inputs: Sequence[Any]) -> str | None:
        """Why this replay could overwrite memory an earlier member's handed-out output still
        needs, or None."""
        mine = set()
        for ptr, lender, k, idx in self._groups:
            assert lender.handouts is not None
            extra = lender.handouts.extra_refs(k)
            # the call's own references: one per distinct tensor object among the group's inputs
            if extra is None or extra > (1 if len(idx) == 1 else len({id(inputs[i]) for i in idx})):
                return f"input {idx[0]}, which this graph overwrites after reading it, is referenced elsewhere"
            mine.add(ptr)
        clear_at = self._clear_at
        for j, (ref, exposed) in enumerate(self._exposed):
            other = ref()
            if other is None:
                continue
            handouts = other.handouts
            if handouts is None or handouts.dead or handouts.generation == clear_at[j]:
                continue
            if not exposed - handouts.dead_outputs:  # found dead by another member's check
                clear_at[j] = handouts.generation
                continue
            live = handouts.live_among(exposed)
            if not live:
                clear_at[j] = handouts.generation
            for k in live:
                if handouts.slots[k].storage_ptr not in mine:
                    return "an output of a graph captured earlier in the pool is in use where this graph's buffers lie"
        return None
