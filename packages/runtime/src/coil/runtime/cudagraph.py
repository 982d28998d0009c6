"""CUDA graphs for a boxed callable: capture once, replay with static input buffers.

`CudaGraphRunner(call, example_inputs, spec, policy)`: `spec` (`CaptureSpec`) describes the call
(static, mutated and table-read inputs, its device, its launches), `policy` (`ReplayPolicy`) how
outputs are handed out and memory is shared (`coil.runtime.cudagraph_options`).

1. **Warm-up.** `call(list(example_inputs))` runs once, eagerly, on a side stream, on the example
   inputs themselves: it compiles/binds every kernel, initialises cuBLAS, and its mutations of the
   inputs happen exactly once, as for a normal call. One side stream per device serves every
   runner's warm-ups and captures: cuBLAS keeps a workspace per stream and the caching allocator
   caches blocks per stream, so a stream per runner would hold both once per runner
   (`coil.runtime.capture_streams`). Its result is kept in `first_outputs` (the
   right answer for the example inputs: a caller that built the runner from a real call returns it;
   under `lazy_clones` it is copied into the graph's outputs after the capture and
   `first_outputs` are hand-outs over them, as a replay's outputs are).
   Inputs whose `Tensor._version` moved during the warm-up are recorded as mutated.
2. **Static inputs.** Each tensor input is either *static* (its storage is used by the graph in
   place: parameters and buffers) or *copied* (a static buffer with the same size, stride and dtype
   is allocated; every replay copies the caller's tensor into it, unless the caller passes that
   very buffer; a broadcast input, stride 0, is copied one element per distinct address). Static
   inputs are `spec.static_input_indices`, or, when None, every input that is an `nn.Parameter`;
   `spec.also_static` adds more (a module's buffers, which Dynamo marks static: batch norm's
   running statistics are then updated in place instead of being copied in and back out each
   replay). Non-tensor inputs (ints, floats, None) are baked into the graph.
3. **Capture.** If no static input was mutated by the warm-up, `call` runs once more on the static
   buffers (so kernels specialise on their alignment before capture); then it is captured into a
   `torch.cuda.CUDAGraph` (on the side stream, in a private memory pool or `policy.pool`).
4. **Replay** (`runner(inputs)`): checks, copies the copied inputs in, `graph.replay()` on the
   current stream, copies mutated copied inputs back into the caller's tensors, returns outputs.
   A call from another stream than the last replay's (any runner's, on that device) first makes
   the current stream wait for that one (`capture_streams.after_last_replay`): its writes into graph memory
   would otherwise race with the earlier replay still running.

Checks per replay: the number of inputs; each copied input's shape and dtype (a mismatch raises
`ValueError`: the graph is specialised to shapes); each baked non-tensor input's value
(`ValueError` when it differs); each static input's `data_ptr()`: when a static input moved (a
new parameter tensor), the runner stops replaying (one warning; `capture_error` says why) and
every later call runs `call` directly. (A runner does not re-capture in place for the new
address; `call_sites.cudagraphify` gives each call site, each set of static-input addresses, a
runner of its own.) The address is what a replay reads, not the storage: a static input may be
another storage at the captured address (FSDP2 frees a gathered parameter and gathers the next
one into the same memory), so an output over a static input's memory is returned over this
call's input, as the graph run directly would return it.

**Aliasing rule (outputs).** With `clone_outputs=True` (the default) every tensor output is a fresh
clone of the graph's static output (`Tensor.clone()`, strides preserved for dense tensors): what a
call returns is never overwritten by a later replay, never aliases an input, and outputs never
alias each other (an output that was a view of an input or of another output is a copy). This is
the safe rule, at the cost of one copy of the outputs per call. With `clone_outputs=False` the
graph's own output tensors are returned: they are overwritten by the next replay (consume or copy
them first) and they may alias static inputs; use it only where the caller controls that.
With `lazy_clones=True` (and `clone_outputs=True`) the returned tensors are the graph's memory
until the next replay, which first copies away those the caller still holds
(`coil.runtime.lazy_outputs`): the same guarantee, a copy only for what is kept.

Mutated inputs: mutations of static inputs happen in place at replay; mutations of copied inputs
are detected through `Tensor._version` during the warm-up (ATen in-place ops, coil's `copy_`
externs) and copied back after each replay. A Triton kernel writing into an input does not move
`_version`: list such inputs in `spec.mutated_input_indices`.

**Borrowed inputs** (`policy.input_buffers={i: tensor}`): input `i`'s static buffer is `tensor`, memory
another runner owns (the static output of an earlier CUDA-graph segment, or of a training
forward). The graph reads it in place; no copy is made when the caller passes that very tensor
(same address and strides), which is what happens while the owner replays. At construction the
example input is copied into it when it is another tensor (the owner promises nobody else holds
that memory yet). When a later caller passes another tensor (the owner ran uncaptured), the runner
runs `call` directly for that call (correct, slower; logged once): copying into memory the owner
may have handed out could overwrite a tensor still in use. `policy.borrow_inputs` finds such inputs
itself: a copied input with the address, shape, strides and dtype of a live runner's static output
(one returned through `static_outputs`) is borrowed from it.

**Static outputs and liveness (training graphs).** `static_outputs` are output indices returned
without a clone: each call gets a new tensor object (`detach()`) over the graph's static output,
from the first call on (the warm-up result is copied into the static output, so the address is
stable from the start). The next replay would overwrite that memory, so before every replay the
runner checks the use count of each such storage (`coil.runtime.liveness`: storages of parameters
are exempt, a replay does not write them) against its count right after capture: if a tensor
handed out earlier is still referenced (an autograd graph still holding the previous step's saved
activations, a caller keeping outputs), this call runs `call` directly (its outputs are fresh
tensors; the graph's memory is left alone) and a message is logged once. The first time a
runner finds outputs in use it runs `gc.collect()` and checks again: a tensor kept only by a
reference cycle is not in use, but lives until a full collection, which may never come in a
process with many long-lived objects. This is the rule of TorchInductor's cudagraph trees (storage
liveness through `torch._C._storage_Use_Count`), in its simplest form: one graph per runner, no
re-recording.

`static_outputs=FRESH` hands out every tensor output of more than one element whose storage is
not an input's (one-element outputs, a loss, are cloned per call instead, so a caller that keeps
the last step's loss does not stop the next replay). A training backward's gradients are handed
out so: AccumulateGrad may keep the very tensor as `.grad`. Before a replay, outputs still
referenced are copied out of the graph's memory with every holder moved onto the copy
(`Handouts.release`): a kept `.grad` moves once per optimizer step, and gradient accumulation and
`zero_grad(set_to_none=False)` keep replaying. (A torch without `UntypedStorage._swap_data_ptr_`
can move only the first call's outputs; a later output found kept runs that call uncaptured and
is held from then on, so that AccumulateGrad copies it: `coil.runtime.handouts`.)

**Shared pools.** A runner that borrows another's static outputs (a training backward reading its
forward's saved activations) captures into the lender's memory pool instead of a new one, so the
backward's scratch memory reuses the forward's scratch memory, as in eager execution (with two
pools a step would hold both peaks). Safe because: the two never replay at once; memory a graph
captured *earlier* hands out stays allocated (its runner holds it), so a later capture never
places anything there; but a later graph's handed-out outputs (the backward's gradients) may lie
in an earlier graph's scratch memory, so a runner does not replay while any runner captured after
it in the same pool has handed-out outputs still referenced (it first has that runner copy them
away, `Handouts.release`).

**Handed-out outputs (`hold_outputs=False`, training graphs).** Holding outputs pins their
memory in the pool: a backward captured into its forward's pool could never reuse the memory of
saved activations it has finished reading, and the step's peak would hold all of them, the
backward's scratch memory and every gradient at once, well above eager execution's peak
(docs/perf.md). So in this mode a runner keeps no output after capture (`coil.runtime.handouts`):
every tensor output of more than one element not over a static input's memory is handed out,
uncloned, as the capture's own tensor on the first call and as a tensor over the same addresses
after each replay; copied inputs that are not mutated get their static buffers inside the
capture, from the pool. A borrowing runner in this mode receives the lender's
first-call tensors themselves as its capture's inputs, and holds no reference to them either,
so the wrapper frees each as it goes and the allocator hands that memory to the capture's later
buffers, as in eager execution ("consumed" inputs). The liveness rule then needs two more
checks, made before every replay of a runner captured after others in its pool
(`graph_pools.PoolGuard`):

* an earlier member's output that was free when this runner was captured (its memory may now
  hold this runner's buffers) must be unreferenced now; outputs still referenced at capture
  time were kept out of this runner's memory;
* a consumed input, which the replay overwrites after its last read, must be referenced by the
  call's input list alone (not, say, by an autograd graph kept with `retain_graph=True`).

A borrowing runner shares its lender's pool only while the lender's outputs are still the
capture's own tensors (the caching allocator knows them as allocated); later, it borrows nothing.

The boxed calling convention is kept: `runner(inputs)` clears the `inputs` list once it has
copied them in (like coil's compiled callables, which free inputs early), and `call` receives a
new list each time.

`coil.runtime.call_sites.cudagraphify(call, spec, policy)` wraps this into a boxed callable with
a runner per call site (the addresses of the static inputs; with `by_shape`, also the sizes): a
graph compiled once and called per layer with each layer's parameters captures one graph per
layer, normally in the first site's pool. The pool rules above hold between sites as between a
forward and its backward; a later site's outputs handed out lazily (`lazy_clones`) are copied
away before an earlier site's replay would overwrite them while still held.

**Inputs read through a pointer table** (`spec.indirect`, a wrapper's `call.indirect`): inputs that
the graph's kernels read at an address they load from a device-side table when they run
(coil.wrapper_codegen's `plan_indirect`, coil.triton_codegen's `indirect`). They are neither
static nor copied: no buffer is made for them, and the caller's tensors are read in place. Before
each replay the runner checks their shape and dtype (ValueError, as for copied inputs) and calls
`indirect.prepare(inputs)`, which writes their addresses into the table (copying an input that is
misaligned or strided otherwise first); warm-ups and uncaptured calls run `call`, which does it
itself, and the capture records the table's address only. A training backward's tangents
(autograd's zeros for outputs the loss does not use, made anew for every backward) are read so:
a copy of each inside the graph's pool would be held beside the caller's.

A graph with steps a CUDA graph cannot capture is run in segments, one runner per capturable
segment (`coil.runtime.segments`).
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from coil.runtime.capture_streams import (
    after_last_replay,
    blas_workspaces_dropped,
    generators_out_of_capture,
    record_stream,
    side_stream,
)
from coil.runtime.cudagraph_options import (
    COPY_BYTES_PER_S,
    FRESH,
    LAUNCH_S,
    CaptureSpec,
    ReplayPolicy,
    copies_outweigh_launches,
)
from coil.runtime.errors import without_frames
from coil.runtime.graph_inputs import (
    copy_into,
    distinct_elements,
    input_roles,
    nbytes,
    storage_ids,
    view_over,
    view_text,
    where,
)
from coil.runtime.graph_pools import (
    OWNERS,
    PoolGuard,
    borrowed_inputs,
    join_pool,
    later_members,
    open_to_captures,
)
from coil.runtime.handouts import Handouts, Slot, _tensors_over
from coil.runtime.lazy_outputs import LazyOutputs, lazy_outputs_of
from coil.runtime.liveness import StorageLiveness
from coil.runtime.pool_segments import expandable_capture

if TYPE_CHECKING:
    import torch
    from coil.runtime.graph_inputs import InputRoles

__all__ = ["COPY_BYTES_PER_S", "FRESH", "LAUNCH_S", "BoxedCall", "CaptureSpec", "CudaGraphRunner", "ReplayPolicy"]

log = logging.getLogger("coil.runtime")

BoxedCall = Callable[[list[Any]], Sequence[Any]]


class CudaGraphRunner:
    """A boxed callable captured into a CUDA graph (see the module docstring for the rules).

    Args:
        call: `call(args: list) -> tuple/list` of outputs; it may clear `args`.
        example_inputs: the inputs of the warm-up call (and the layout of the static buffers);
            every tensor among them must be on one CUDA device (or `spec.device` when none is a
            tensor).
        spec: the call's facts (`CaptureSpec`: static, mutated and table-read inputs, device,
            launches for the worth-it rule); None: `CaptureSpec()`.
        policy: how outputs are handed out and memory shared (`ReplayPolicy`); None:
            `ReplayPolicy()` (every output cloned, a private pool, nothing borrowed).

    Construction runs the named steps in order: `_assign_roles`, `_warm_up`, `_record_mutations`,
    `_worth_capturing`, `_static_buffers` (with the second warm-up), `_release_borrowed`,
    `_capture_or_fall_back`, `_settle_outputs`.

    Attributes: `first_outputs` (the warm-up result), `static_indices`, `mutated_indices`,
    `borrowed` (the borrowed input indices), `consumed` (borrowed inputs whose memory the capture
    reused), `handouts` (`hold_outputs=False`: the handed-out outputs), `graph`, `graph_outputs`
    (the captured static outputs), `capture_error` (set when the capture raised, the copies were
    not worth it or a static input moved: every later call then runs `call` directly, with one
    warning), `uncaptured_calls` (calls run directly because of the liveness rule or a borrowed
    input at another address).
    """

    def __init__(self, call: BoxedCall, example_inputs: Sequence[Any], spec: CaptureSpec | None = None,
                 policy: ReplayPolicy | None = None) -> None:
        spec = CaptureSpec() if spec is None else spec
        policy = ReplayPolicy() if policy is None else policy
        self._init_state(call, policy)
        inputs = list(example_inputs)
        borrowed = self._assign_roles(inputs, spec, policy)
        versions = {i: inputs[i]._version for i in self._tensor_idx}
        self.first_outputs: tuple[Any, ...] | None = self._warm_up(inputs)
        mutated = self._record_mutations(inputs, versions, spec)
        if not self._worth_capturing(inputs, borrowed, spec.launches, policy):
            return
        in_capture = self._static_buffers(inputs, borrowed, mutated)
        consumable = self._release_borrowed(inputs, borrowed, example_inputs)
        if not self._capture_or_fall_back(in_capture, consumable):
            return
        self._settle_outputs(policy)

    # -- construction steps ---------------------------------------------------------------------

    def _init_state(self, call: BoxedCall, policy: ReplayPolicy) -> None:
        """Every attribute at its value before a capture."""

        self._call = call
        self.uncaptured_calls = 0
        self._logged_uncaptured = False
        self._logged_release = False
        self._collected = False  # gc.collect() tried once against outputs in use (__call__)
        self._liveness: StorageLiveness | None = None
        self._lazy: LazyOutputs | None = None
        self._alias_idx: tuple[int, ...] = ()
        self.clone_outputs = policy.clone_outputs
        self.hold_outputs = policy.hold_outputs
        self.handouts: Handouts | None = None
        self.consumed: tuple[int, ...] = ()
        # hold_outputs=False: input index -> (lender, its output index) for borrowed inputs;
        # slots of the copied inputs' buffers allocated inside the capture, and tensors over them;
        # the checks against the pool's earlier members
        self._lent: dict[int, tuple[CudaGraphRunner, int]] = {}
        self._in_slots: dict[int, Slot] = {}
        self._in_views: dict[int, torch.Tensor] = {}
        self._input_meta: dict[int, tuple[tuple[int, ...], tuple[int, ...], torch.dtype]] = {}
        self._guard: PoolGuard | None = None
        # outputs over a static input's memory -> (that input, its storage at the capture): rebuilt
        # over the replay's own input when that is another storage
        self._param_sources: dict[int, tuple[int, int]] = {}
        self._cloned_idx: tuple[int, ...] = ()
        self._borrowed_at: tuple[list[int], list[tuple[int, ...]]] | None = None  # at the first replay
        self._copy_to: tuple[tuple[int, torch.Tensor, int, tuple[int, ...], torch.Size, torch.dtype, bool],
                             ...] | None = None  # the same
        self.graph: torch.cuda.CUDAGraph | None = None
        self._static_outputs: tuple[Any, ...] = ()
        self.capture_error: Exception | None = None

    def _assign_roles(self, inputs: list[Any], spec: CaptureSpec, policy: ReplayPolicy) -> dict[int, Any]:
        """Each input's role (`coil.runtime.graph_inputs`), the borrowed ones found, and the pool.
        Returns the borrowed inputs' static buffers (input index -> tensor)."""
        import torch

        self._n = len(inputs)
        roles: InputRoles = input_roles(inputs, spec, policy.input_buffers)
        self.device = roles.device
        self._tensor_idx = roles.tensors
        self.static_indices: tuple[int, ...] = roles.static
        self._indirect = spec.indirect
        self.indirect_indices: tuple[int, ...] = roles.indirect
        lender: CudaGraphRunner | None = None
        borrowed = dict(policy.input_buffers or {})
        if policy.borrow_inputs:
            borrowed, self._lent, lender = borrowed_inputs(inputs, roles, borrowed, policy.hold_outputs)
        if borrowed and log.isEnabledFor(logging.DEBUG):
            log.debug("CudaGraphRunner: borrows inputs %s", {i: (self._lent[i][1] if i in self._lent else None,
                                                               where(inputs[i])) for i in sorted(borrowed)})
        bad = sorted(i for i in borrowed if i in roles.static or i not in roles.tensors)
        if bad:
            raise ValueError(f"input_buffers {bad} must be copied (non-static) tensor inputs")
        self.borrowed: tuple[int, ...] = tuple(sorted(borrowed))
        self._copy_idx: tuple[int, ...] = tuple(i for i in roles.tensors if i not in roles.static
                                                and i not in roles.indirect)
        self._copied_in: tuple[int, ...] = tuple(i for i in self._copy_idx if i not in borrowed)  # each replay
        self._scalars: dict[int, Any] = dict(roles.scalars)
        # a graph reading another's static outputs shares its pool (see "Shared pools")
        given = policy.pool if policy.pool is not None and (policy.hold_outputs or open_to_captures(policy.pool)) \
            else None
        self._pool: Any = (lender._pool if lender is not None else given if given is not None
                           else torch.cuda.graph_pool_handle())
        return borrowed

    def _warm_up(self, inputs: list[Any]) -> tuple[Any, ...]:
        """Step 1: `call` once, eagerly, on the side stream, on the example inputs themselves."""
        import torch

        current = torch.cuda.current_stream(self.device)
        side = side_stream(self.device)
        side.wait_stream(current)
        with torch.cuda.device(self.device), torch.cuda.stream(side), blas_workspaces_dropped():
            first = tuple(self._call(list(inputs)))
        current.wait_stream(side)
        for out in first:
            if isinstance(out, torch.Tensor) and out.is_cuda:
                record_stream(out, current)  # allocated on `side`, used on `current`
        return first

    def _record_mutations(self, inputs: list[Any], versions: dict[int, int], spec: CaptureSpec) -> set[int]:
        """The inputs the warm-up mutated (`Tensor._version` moved) or `spec` names."""
        mutated = {i for i in self._tensor_idx if inputs[i]._version != versions[i]}
        mutated |= set(spec.mutated_input_indices)
        self.mutated_indices: tuple[int, ...] = tuple(sorted(mutated))
        self._copy_back: tuple[int, ...] = tuple(i for i in self._copy_idx if i in mutated)
        return mutated

    def _worth_capturing(self, inputs: list[Any], borrowed: dict[int, Any], launches: int | None,
                         policy: ReplayPolicy) -> bool:
        """The worth-it rule (`copies_outweigh_launches`); when it fails, `capture_error` says why."""
        if launches is None:
            return True
        first = self.first_outputs
        assert first is not None
        handed_out = policy.handed_out
        keep = set(range(len(first))) if handed_out == FRESH else set(handed_out)
        moved = sum(nbytes(inputs[i]) for i in self._copy_idx if i not in borrowed)
        moved += sum(nbytes(o) for k, o in enumerate(first) if k not in keep) if policy.clone_outputs else 0
        if not copies_outweigh_launches(moved, launches):
            return True
        self.capture_error = RuntimeError(
            f"not worth a CUDA graph: copying {moved} bytes in and out costs more than {launches} launches save")
        log.info("CudaGraphRunner: %s", self.capture_error)
        return False

    def _static_buffers(self, inputs: list[Any], borrowed: dict[int, Any], mutated: set[int]) -> set[int]:
        """Steps 2 and 3: static buffers for the copied inputs, then a second warm-up on them
        (alignment) unless it would repeat a static input's mutation. With hold_outputs=False
        only mutated inputs keep theirs; the others get one inside the capture (returned) and a
        temporary one for the second warm-up."""
        import torch

        self._static_inputs: list[Any] = list(inputs)
        in_capture = set() if self.hold_outputs else {i for i in self._copy_idx
                                                      if i not in borrowed and i not in mutated}
        temporary: list[Any] = list(inputs)
        with torch.no_grad():
            for i in self._copy_idx:
                x = inputs[i]
                if i in borrowed:
                    buf = borrowed[i]
                    if (buf.shape != x.shape or buf.dtype != x.dtype or buf.stride() != x.stride()
                            or buf.device != x.device):
                        raise ValueError(f"input_buffers[{i}] is {tuple(buf.shape)} {buf.dtype} stride "
                                         f"{buf.stride()}, the input is {tuple(x.shape)} {x.dtype} stride "
                                         f"{x.stride()}")
                    if buf.data_ptr() != x.data_ptr():
                        copy_into(buf, x)
                else:
                    buf = torch.empty_strided(x.size(), x.stride(), dtype=x.dtype, device=x.device)
                    copy_into(buf, x)
                temporary[i] = buf
                self._static_inputs[i] = None if i in in_capture or i in self._lent else buf
                if i in in_capture:
                    self._input_meta[i] = (tuple(x.size()), tuple(x.stride()), x.dtype)
                del x, buf
        self._static_ptrs = {i: inputs[i].data_ptr() for i in self.static_indices}
        if not (mutated & set(self.static_indices)):
            current = torch.cuda.current_stream(self.device)
            side = side_stream(self.device)
            side.wait_stream(current)
            with torch.cuda.device(self.device), torch.cuda.stream(side), blas_workspaces_dropped():
                self._call(temporary)
            current.wait_stream(side)
        return in_capture

    def _release_borrowed(self, inputs: list[Any], borrowed: dict[int, Any],
                          example_inputs: Sequence[Any]) -> dict[int, Any]:
        """hold_outputs=False: the lent inputs, for the capture alone to hold (returned); every
        other reference this runner has to the inputs is dropped, and `example_inputs` cleared
        when it is a list."""
        if self.hold_outputs:
            return {}
        consumable = {i: inputs[i] for i in self._lent}
        inputs.clear()
        borrowed.clear()
        if isinstance(example_inputs, list):
            example_inputs.clear()
        return consumable

    def _capture_or_fall_back(self, in_capture: set[int], consumable: dict[int, Any]) -> bool:
        """Capture; an op that cannot be captured makes the runner run eagerly from now on
        (`capture_error`, one warning; False)."""
        try:
            self._capture(in_capture, consumable)
        except Exception as exc:
            self.capture_error = without_frames(exc)  # the runner lives as long as its graph
            generators_out_of_capture()
            log.warning("CudaGraphRunner: capture failed (%s: %s); running without a CUDA graph", type(exc).__name__, exc)
            return False
        finally:
            for i in self.indirect_indices:  # read at the caller's address each replay: not kept
                self._static_inputs[i] = None
        return True

    def _capture(self, in_capture: Iterable[int] = (), consumable: dict[int, Any] | None = None) -> None:
        """Capture `call` on the static inputs; `in_capture` inputs get buffers allocated inside the
        capture (from the pool) and `consumable` ones are passed with no reference kept."""
        import torch

        self.graph = None
        self._static_outputs = ()
        torch.cuda.synchronize(self.device)
        graph = torch.cuda.CUDAGraph()
        args = list(self._static_inputs)
        with torch.cuda.device(self.device), expandable_capture(), blas_workspaces_dropped(), \
                torch.cuda.graph(graph, pool=self._pool, stream=side_stream(self.device)):
            for i in sorted(in_capture):
                size, stride, dtype = self._input_meta[i]
                buf = torch.empty_strided(size, stride, dtype=dtype, device=self.device)
                self._in_slots[i] = Slot.of(buf)
                args[i] = buf
                del buf
            if consumable:
                for i in list(consumable):
                    args[i] = consumable.pop(i)
            outputs = tuple(self._call(args))
        self.graph = graph
        self._static_outputs = outputs

    def _settle_outputs(self, policy: ReplayPolicy) -> None:
        """After the capture: which outputs are handed out uncloned (and how their use is
        watched), the pool membership, and lazy clones or the consumed inputs."""
        import torch

        self._alias_idx = self._handed_out_indices(policy.handed_out)
        self._pool_position = join_pool(self, self._pool)
        static = set(self.static_indices)
        owner = {int(x.untyped_storage()._cdata): i for i, x in enumerate(self._static_inputs)
                 if i in static and isinstance(x, torch.Tensor)}
        params = set(owner)
        outs = {k: int(t.untyped_storage()._cdata) for k, t in enumerate(self._static_outputs)
                if isinstance(t, torch.Tensor)}
        self._param_sources = {k: (owner[c], c) for k, c in outs.items() if c in owner}
        # hold_outputs=False: the tensor outputs neither handed out nor over a static input, cloned
        # at each replay (the others come from the hand-outs or the call's inputs)
        self._cloned_idx = tuple(k for k in outs if k not in self._alias_idx and k not in self._param_sources)
        if self._alias_idx:
            self._hand_out_static_outputs(params)
        if policy.lazy_clones and self.hold_outputs and self.clone_outputs:
            self._lazy = lazy_outputs_of(self._static_outputs, self._static_inputs, self._alias_idx)
            if self._lazy is not None and self.first_outputs is not None:
                self.first_outputs = self._lazy.adopt(self.first_outputs)
        if not self.hold_outputs:
            self._guard = PoolGuard(self, self._pool, self._lent)
            self.consumed = self._guard.consumed

    def _handed_out_indices(self, static_outputs: tuple[int, ...] | str) -> tuple[int, ...]:
        """The tensor outputs handed out uncloned. FRESH: every tensor output over memory that is
        not an input's, but one-element outputs (a loss) are held and cloned: a caller keeping
        the last step's loss then does not stop the next replay (the liveness rule)."""
        import torch

        outs = self._static_outputs
        chosen: Iterable[int] = () if isinstance(static_outputs, str) else static_outputs
        if static_outputs == FRESH:
            taken = storage_ids(self._static_inputs)
            chosen = [k for k, o in enumerate(outs) if isinstance(o, torch.Tensor) and o.numel() > 1
                      and int(o.untyped_storage()._cdata) not in taken]
        # the warm-up result is copied into a handed-out output: one whose elements overlap
        # beyond broadcasting cannot take it, and is cloned instead
        return tuple(k for k in sorted(set(chosen))
                     if isinstance(outs[k], torch.Tensor) and distinct_elements(outs[k]) is not None)

    def _hand_out_static_outputs(self, params: set[int]) -> None:
        """Stable addresses from the first call on: the warm-up result goes into the graph's memory
        (parameter storages excepted: the graph returns the parameter itself), and the outputs
        handed out are watched (`StorageLiveness`) or, not held, recorded (`Handouts`)."""
        import torch

        first = self.first_outputs
        assert first is not None
        with torch.no_grad():
            for k in self._alias_idx:
                out = self._static_outputs[k]
                if int(out.untyped_storage()._cdata) not in params and out.data_ptr() != first[k].data_ptr():
                    copy_into(out, first[k])
                del out
        self.first_outputs = tuple(self._static_outputs[k].detach() if k in self._alias_idx else o
                                   for k, o in enumerate(first))
        del first
        if self.hold_outputs:
            self._liveness = StorageLiveness([self._static_outputs[k] for k in self._alias_idx], exclude=params)
        else:
            self.handouts = Handouts({k: self._static_outputs[k] for k in self._alias_idx})
            held: list[Any] = list(self._static_outputs)
            for k in self._alias_idx:
                held[k] = None
            self._static_outputs = tuple(held)
        OWNERS.add(self)

    # -- replay ---------------------------------------------------------------------------------

    @property
    def graph_outputs(self) -> tuple[Any, ...]:
        """The captured graph's static outputs (empty when nothing was captured; None for outputs
        handed out without being held)."""
        return self._static_outputs

    def _stop_replays(self, why: str) -> None:
        """No more replays: every later call runs `call` directly (`capture_error` says why; one
        warning). What was handed out keeps its memory (tensors own their storages)."""
        self.capture_error = RuntimeError(why)
        log.warning("CudaGraphRunner: %s; running without a CUDA graph", why)
        self.graph = None
        self._static_outputs = ()
        self._liveness = None
        self._lazy = None
        self.handouts = None
        self._alias_idx = ()
        OWNERS.discard(self)

    def _uncaptured(self, inputs: list[Any], why: str) -> tuple[Any, ...]:
        """Run `call` directly for this one call (its outputs are fresh); log the first time."""
        self.uncaptured_calls += 1
        if not self._logged_uncaptured:
            self._logged_uncaptured = True
            log.info("CudaGraphRunner: running a call without the CUDA graph (%s); logged once", why)
        return tuple(self._call(inputs))

    def _handed_out_live(self, release: bool = False) -> bool:
        """Whether an output this runner handed out without copying is still referenced; with
        `release`, its holders are first moved onto copies (`Handouts.release`: a gradient kept
        as `.grad`, a view), so that none is."""
        if self.handouts is None:
            return self._liveness is not None and bool(self._liveness.live())
        if self.handouts.dead:  # nothing handed out since every output was found unreferenced
            return False
        if not release:
            return bool(self.handouts.live())
        moved = self.handouts.evacuated
        why = self.handouts.release()
        if self.handouts.evacuated > moved and not self._logged_release:
            self._logged_release = True
            log.info("CudaGraphRunner: outputs a caller kept from the previous call (gradients accumulated "
                     "into .grad, say) copied out of the graph's memory before the replay; logged once")
        if why is not None:
            log.info("CudaGraphRunner: %s", why)
        return why is not None

    def _outputs_in_use(self, release: bool) -> str | None:
        """Why a replay would overwrite outputs still in use (this runner's or a later pool
        member's), or None; `release`: copy away first what can be (`_handed_out_live`)."""
        if self._handed_out_live(release):
            return "an output of the previous replay is still referenced"
        for other in later_members(self._pool, self._pool_position):
            if other._lazy is None and other.handouts is not None and other.handouts.dead:
                continue  # the common case, without a call
            if other._handed_out_live(release):
                return "a graph captured later in the same memory pool still has outputs in use"
            why = other._lazy.free() if other._lazy is not None else None  # its held outputs copied away
            if why is not None:
                return f"a graph captured later in the same memory pool still has outputs in use ({why})"
        return None

    def _collect_once(self) -> None:
        """The runner's one `gc.collect()` against outputs held only by a reference cycle."""
        self._collected = True
        gc.collect()

    def _replay_blocker(self, inputs: list[Any]) -> str | None:
        """Why this call must run uncaptured (outputs still in use, a borrowed input elsewhere than
        the graph reads, an earlier pool member's output in the way), or None."""
        import torch

        why = self._outputs_in_use(release=self._collected)
        if why is not None and not self._collected:
            # outputs held only by a reference cycle die in a collection, and Python's full
            # collections can be rare in a process with many long-lived objects (see the
            # runtime README, "the liveness rule"). Once per runner, before copying any away.
            self._collect_once()
            why = self._outputs_in_use(release=True)
        if why is not None:
            return why
        if self._borrowed_at is None:
            self._borrowed_at = self._borrowed_addresses()
        borrowed, (ptrs, strides) = self.borrowed, self._borrowed_at
        try:  # all at once (the usual case); input by input to name the one that differs
            placed = ([inputs[i].data_ptr() for i in borrowed] == ptrs
                      and [inputs[i].stride() for i in borrowed] == strides)
        except AttributeError:  # not a tensor
            placed = False
        if not placed:
            for i, ptr, stride in zip(borrowed, ptrs, strides, strict=True):
                src = inputs[i]
                if not isinstance(src, torch.Tensor) or src.data_ptr() != ptr or src.stride() != stride:
                    return self._misplaced(i, src)
        return self._guard.conflict(inputs) if self._guard is not None else None

    def _borrowed_addresses(self) -> tuple[list[int], list[tuple[int, ...]]]:
        """The address and strides the graph reads each borrowed input at (in `borrowed`'s order):
        a lent input's slot in its lender, another's static buffer. Only these are checked before a
        replay: its sizes and dtype are the compiled graph's own (Dynamo guards them; `by_shape`
        sites key them). A lender that stopped replaying hands out fresh tensors: its slot
        matches no input."""
        ptrs, strides = [], []
        for i in self.borrowed:
            if i in self._lent:
                slot = self._lent_slot(i)
                ptrs.append(slot.data_ptr if slot is not None else -1)
                strides.append(slot.stride if slot is not None else ())
            else:
                dst = self._static_inputs[i]
                ptrs.append(dst.data_ptr())
                strides.append(tuple(dst.stride()))
        return ptrs, strides

    def _lent_slot(self, i: int) -> Slot | None:
        """Where lent input `i` lies: its lender's slot, or None when the lender no longer hands
        outputs out (it stopped replaying)."""
        lender, k = self._lent[i]
        return lender.handouts.slots[k] if lender.handouts is not None else None

    def _misplaced(self, i: int, src: Any) -> str:
        """Why borrowed input `i` (this call's `src`) stops a replay: not where the graph reads it."""
        if i in self._lent:
            slot = self._lent_slot(i)
            reads = (view_text(slot.data_ptr, slot.size, slot.stride, slot.dtype) if slot is not None
                     else "memory it no longer hands out")
            return (f"borrowed input {i} is not at the address the graph reads ({where(src)}; the graph reads "
                    f"output {self._lent[i][1]} of its lender at {reads})")
        return (f"borrowed input {i} is not at the address the graph reads "
                f"({where(src)}; the graph reads {where(self._static_inputs[i])})")

    def _copy_inputs_in(self, inputs: list[Any]) -> None:
        """Copy the copied inputs into their static buffers (skipped for the buffer itself) and
        check the baked non-tensor inputs; ValueError for another shape, dtype or value."""
        import torch

        if self._copy_to is None:
            self._copy_to = self._copy_targets()
        dsts: list[torch.Tensor] = []
        srcs: list[torch.Tensor] = []
        for i, dst, ptr, stride, size, dtype, broadcast in self._copy_to:
            src = inputs[i]
            if src.data_ptr() == ptr and src.stride() == stride:
                continue
            if src.shape != size or src.dtype != dtype:
                raise ValueError(
                    f"CudaGraphRunner: input {i} is {tuple(src.shape)} {src.dtype}, the graph was "
                    f"captured for {tuple(size)} {dtype}"
                )
            if broadcast:
                copy_into(dst, src)
            else:
                dsts.append(dst)
                srcs.append(src)
        if len(dsts) > 1:  # one call (and, for like layouts, one launch) for all the copies
            torch._foreach_copy_(dsts, srcs)
        elif dsts:
            dsts[0].copy_(srcs[0])
        for i, value in self._scalars.items():
            if inputs[i] is not value and inputs[i] != value:
                raise ValueError(
                    f"CudaGraphRunner: input {i} is {inputs[i]!r}, the graph was captured with "
                    f"{value!r}"
                )

    def _copy_targets(self) -> tuple[tuple[int, torch.Tensor, int, tuple[int, ...], torch.Size, torch.dtype, bool], ...]:
        """Per copied input, what `_copy_inputs_in` compares and writes at every replay, taken
        once after the capture: (input, its buffer, the buffer's address, strides, sizes and
        dtype, whether a stride is 0: such a buffer is written by `copy_into`)."""
        if self._in_slots and not self._in_views:
            self._in_views = _tensors_over(self._in_slots)
        out = []
        for i in self._copied_in:
            dst = self._in_views[i] if i in self._in_slots else self._static_inputs[i]
            stride = tuple(dst.stride())
            out.append((i, dst, dst.data_ptr(), stride, dst.shape, dst.dtype, 0 in stride))
        return tuple(out)

    def _prepare_table(self, inputs: list[Any]) -> None:
        """Check the table-read inputs' shapes and dtypes (ValueError) and write their addresses
        into the table the captured kernels read."""
        import torch

        layouts = self._indirect.layouts
        for i in self.indirect_indices:
            src = inputs[i]
            size, _, dtype = layouts[i]
            if not isinstance(src, torch.Tensor) or tuple(src.shape) != tuple(size) or src.dtype != dtype:
                raise ValueError(f"CudaGraphRunner: input {i} is {where(src)}, the graph was captured "
                                 f"for {list(size)} {dtype}")
        self._indirect.prepare(inputs)

    def _replayed_outputs(self, sources: dict[int, Any]) -> tuple[Any, ...]:
        """The outputs of the replay that just ran, under the aliasing rule in effect. `sources`:
        for each output over a static input's memory, this call's input; the output is rebuilt
        over that input's storage, which sits at the captured address but can be another
        storage than the capture's (FSDP2 frees and re-gathers parameters in the same memory)."""
        import torch

        outs = list(self._static_outputs)
        for k, src in sources.items():
            if int(src.untyped_storage()._cdata) != self._param_sources[k][1]:
                outs[k] = view_over(outs[k], src)
        alias = self._alias_idx
        if not self.hold_outputs:  # outputs over a parameter's memory: the graph's own, as uncaptured
            if self.handouts is not None:
                for k, t in self.handouts.replayed().items():
                    outs[k] = t
            for k in self._cloned_idx:
                outs[k] = outs[k].clone()
            return tuple(outs)
        if not self.clone_outputs:
            return tuple(o.detach() if k in alias else o for k, o in enumerate(outs))
        lazy = self._lazy
        lazily = lazy.hand_out() if lazy is not None and lazy.enabled else {}
        return tuple(lazily[k] if k in lazily else o.detach() if k in alias
                     else o.clone() if isinstance(o, torch.Tensor) else o
                     for k, o in enumerate(outs))

    def __call__(self, inputs: list[Any]) -> tuple[Any, ...]:
        """Replay on `inputs` (same count, shapes and dtypes as the example); clears `inputs`."""
        return self._run(inputs, statics_checked=False)

    def _run(self, inputs: list[Any], statics_checked: bool) -> tuple[Any, ...]:
        """`__call__`; `statics_checked`: the caller found every static input at its captured
        address (`cudagraphify`'s site key), so that check is not made again."""
        if len(inputs) != self._n:
            raise ValueError(f"CudaGraphRunner: expected {self._n} inputs, got {len(inputs)}")
        if self.capture_error is not None:
            return tuple(self._call(inputs))
        why = self._replay_blocker(inputs)
        if why is not None:
            return self._uncaptured(inputs, why)
        after_last_replay(self.device)  # before this call writes memory an earlier replay reads
        moved = [] if statics_checked else [i for i in self.static_indices
                                             if inputs[i].data_ptr() != self._static_ptrs[i]]
        self._copy_inputs_in(inputs)
        if moved:
            # a parameter was replaced (model.to(), a new tensor): the graph reads the old address,
            # and re-capturing for the new one is not done (module docstring), so replays stop
            first = "; ".join(f"input {i}: {type(inputs[i]).__name__} now at {where(inputs[i])}, captured at "
                              f"{self._static_ptrs[i]:#x}" for i in moved[:3])
            self._stop_replays(f"static inputs {moved} moved after capture ({first})")
            return tuple(self._call(inputs))
        if self._indirect is not None:
            self._prepare_table(inputs)  # their addresses into the table the kernels read
        lazy = self._lazy
        if lazy is not None and lazy.resized():
            self._stop_replays("a caller resized an output it was handed, and with it the graph's static output")
            return tuple(self._call(inputs))
        if lazy is not None:  # the last call's outputs still in use: copied away, or no replay
            # one gc.collect() a runner before a first copy, as for the liveness rule (_replay_blocker)
            why = lazy.free(None if self._collected else self._collect_once)
            if why is not None:
                return self._uncaptured(inputs, why)
        keep = [inputs[i] for i in self._copy_back]
        sources = {k: inputs[i] for k, (i, _) in self._param_sources.items()}
        inputs.clear()
        graph = self.graph
        assert graph is not None
        graph.replay()
        for i, dst in zip(self._copy_back, keep, strict=True):
            dst.copy_(self._static_inputs[i])
        return self._replayed_outputs(sources)
