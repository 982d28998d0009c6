"""CUDA graphs for a boxed callable: capture once, replay with static input buffers.

`CudaGraphRunner(call, example_inputs, static_input_indices)`:

1. **Warm-up.** `call(list(example_inputs))` runs once, eagerly, on a side stream, on the example
   inputs themselves: it compiles/binds every kernel, initialises cuBLAS, and its mutations of the
   inputs happen exactly once, as for a normal call. One side stream per device serves every
   runner's warm-ups and captures: cuBLAS keeps a workspace per stream and the caching allocator
   caches blocks per stream (a stream per runner held 46 MiB more on ResNet-50's training step
   and 68 MiB on GPT-2's, measured on an H100). Its result is kept in `first_outputs` (the
   right answer for the example inputs: a caller that built the runner from a real call returns it).
   Inputs whose `Tensor._version` moved during the warm-up are recorded as mutated.
2. **Static inputs.** Each tensor input is either *static* (its storage is used by the graph in
   place: parameters and buffers) or *copied* (a static buffer with the same size, stride and dtype
   is allocated; every replay copies the caller's tensor into it, unless the caller passes that
   very buffer). Static inputs are the `static_input_indices`, or, when None, every input that is
   an `nn.Parameter`; `also_static` adds more (a module's buffers, which Dynamo marks static:
   batch norm's running statistics are then updated in place instead of being copied in and
   back out each replay). Non-tensor inputs (ints, floats, None) are baked into the graph.
3. **Capture.** If no static input was mutated by the warm-up, `call` runs once more on the static
   buffers (so kernels specialise on their alignment before capture); then it is captured into a
   `torch.cuda.CUDAGraph` (on torch's capture side stream, in a private memory pool or `pool`).
4. **Replay** (`runner(inputs)`): checks, copies the copied inputs in, `graph.replay()` on the
   current stream, copies mutated copied inputs back into the caller's tensors, returns outputs.
   A call from another stream than the last replay's (any runner's, on that device) first makes
   the current stream wait for that one (`_after_last_replay`): its writes into graph memory
   would otherwise race with the earlier replay still running.

Checks per replay: the number of inputs; each copied input's shape and dtype (a mismatch raises
`ValueError`: the graph is specialised to shapes); each baked non-tensor input's value
(`ValueError` when it differs); each static input's `data_ptr()`: when a static input moved (a
new parameter tensor), the runner stops replaying (one warning; `capture_error` says why) and
every later call runs `call` directly. (Re-capturing for the new address gave wrong results in a
measurement on an H200 with torch 2.11, so it is not done.)

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
`_version`: list such inputs in `mutated_input_indices`.

**Borrowed inputs** (`input_buffers={i: tensor}`): input `i`'s static buffer is `tensor`, memory
another runner owns (the static output of an earlier CUDA-graph segment, or of a training
forward). The graph reads it in place; no copy is made when the caller passes that very tensor
(same address and strides), which is what happens while the owner replays. At construction the
example input is copied into it when it is another tensor (the owner promises nobody else holds
that memory yet). When a later caller passes another tensor (the owner ran uncaptured), the runner
runs `call` directly for that call (correct, slower; logged once): copying into memory the owner
may have handed out could overwrite a tensor still in use. `borrow_inputs=True` finds such inputs
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
out so: AccumulateGrad may keep the very tensor as `.grad`; while it does, or while the caller
keeps a gradient, the backward runs uncaptured, and `optimizer.zero_grad()` with its default
`set_to_none=True` releases them before the next step.

**Shared pools.** A runner that borrows another's static outputs (a training backward reading its
forward's saved activations) captures into the lender's memory pool instead of a new one, so the
backward's scratch memory reuses the forward's scratch memory, as in eager execution (with two
pools a step would hold both peaks). Safe because: the two never replay at once; memory a graph
captured *earlier* hands out stays allocated (its runner holds it), so a later capture never
places anything there; but a later graph's handed-out outputs (the backward's gradients) may lie
in an earlier graph's scratch memory, so a runner does not replay while any runner captured after
it in the same pool has handed-out outputs still referenced (it runs uncaptured instead).

**Handed-out outputs (`hold_outputs=False`, training graphs).** Holding outputs pins their
memory in the pool: a backward captured into its forward's pool could never reuse the memory of
saved activations it has finished reading, and the step's peak would hold all of them, the
backward's scratch memory and every gradient at once (measured on an H200: 10-33 % above
eager-style allocation, docs/perf.md session 7). So in this mode a runner keeps no output
after capture (`coil.runtime.handouts`): every tensor output of more than one element not over a
static input's memory is handed out, uncloned, as the capture's own tensor on the first call and
as a tensor over the same addresses after each replay; copied inputs that are not mutated get their static buffers
inside the capture, from the pool. A borrowing runner in this mode receives the lender's
first-call tensors themselves as its capture's inputs, and holds no reference to them either,
so the wrapper frees each as it goes and the allocator hands that memory to the capture's later
buffers, as in eager execution ("consumed" inputs). The liveness rule then needs two more
checks, made before every replay of a runner captured after others in its pool:

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

`cudagraphify(call, static_input_indices)` wraps this into a boxed callable that builds the runner
at its first call (returning the warm-up result) and replays afterwards.

**Inputs read through a pointer table** (`indirect`, a wrapper's `call.indirect`): inputs that
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
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from coil.runtime.handouts import Handouts, Slot, _tensors_over
from coil.runtime.lazy_outputs import LazyOutputs
from coil.runtime.liveness import StorageLiveness
from coil.runtime.pool_segments import expandable_capture

if TYPE_CHECKING:
    import torch

log = logging.getLogger("coil.runtime")

BoxedCall = Callable[[list[Any]], Sequence[Any]]
# the worth-it rule (`launches`): bytes copied per second by a device-to-device copy (an H200
# measured ~4.1e12 B/s read + write, i.e. ~2e12 B/s of tensor copied) and launch time saved per
# kernel or extern replayed from a graph (coil's fast launch path: ~5.6 us, docs/perf.md)
COPY_BYTES_PER_S = 2e12
LAUNCH_S = 5e-6
# runners whose static outputs are handed out uncloned (`static_outputs`): `borrow_inputs` looks here
_OWNERS: weakref.WeakSet[CudaGraphRunner] = weakref.WeakSet()
# runners per memory pool, in capture order (see "Shared pools")
_POOL_MEMBERS: dict[Any, list[weakref.ref[CudaGraphRunner]]] = {}
# `static_outputs=FRESH`: hand out every tensor output whose memory is not an input's
FRESH = "fresh"


class CudaGraphRunner:
    """A boxed callable captured into a CUDA graph (see the module docstring for the rules).

    Args:
        call: `call(args: list) -> tuple/list` of outputs; it may clear `args`.
        example_inputs: the inputs of the warm-up call (and the layout of the static buffers);
            every tensor among them must be on one CUDA device.
        device: the CUDA device of a graph whose inputs hold no tensor (one of factory ops only:
            `torch.arange(n, device="cuda")`); ignored when they do.
        static_input_indices: inputs used in place by the graph (parameters, buffers); None
            means every `nn.Parameter` among the inputs.
        also_static: more inputs used in place, besides `static_input_indices` (a module's
            buffers); like those, each must stay at its address (a moved one stops the replays).
        mutated_input_indices: inputs `call` writes into without moving `Tensor._version`.
        clone_outputs: return clones of the graph's outputs (True) or the graph's own tensors.
        pool: a memory pool handle (`torch.cuda.graph_pool_handle()`) to share with other graphs.
        launches: the launches (kernels and extern calls) one call makes. When given, the runner
            captures only if copying the copied inputs in and the outputs out
            (`COPY_BYTES_PER_S`) costs less than the launch time a replay saves (`LAUNCH_S` per
            launch); otherwise it runs `call` directly (`capture_error` says why). A 16384 x
            8192 layer norm is not worth a graph; GPT-2 (250 launches, 200 MB of logits) is.

        input_buffers: input index -> the tensor to use as that input's static buffer (borrowed
            memory; see "Borrowed inputs" in the module docstring).
        static_outputs: output indices returned as new tensor objects over the graph's static
            outputs instead of clones, guarded by the liveness rule (module docstring).
        borrow_inputs: borrow copied inputs that are another runner's live static outputs.
        hold_outputs: False hands every output out without holding it (see "Handed-out
            outputs"); `static_outputs` and `clone_outputs` are then ignored.
        indirect: the wrapper's pointer table (`call.indirect`: `indices`, the inputs it reads;
            `layouts`, index -> (size, stride, dtype); `prepare(inputs)`), or None (see "Inputs
            read through a pointer table").
        lazy_clones: with `clone_outputs` and `hold_outputs`, hand the outputs out uncloned and
            copy away before a replay only those the caller still holds (`coil.runtime.lazy_outputs`;
            outputs over an input's memory, conjugate or negative views and subclasses are cloned).

    Attributes: `first_outputs` (the warm-up result), `static_indices`, `mutated_indices`,
    `borrowed` (the borrowed input indices), `consumed` (borrowed inputs whose memory the capture
    reused), `handouts` (`hold_outputs=False`: the handed-out outputs), `graph`, `graph_outputs` (the captured static
    outputs), `capture_error` (set when the capture raised or a static input moved: every later
    call then runs `call` directly, with one warning), `uncaptured_calls` (calls run directly
    because of the liveness rule or a borrowed input at another address).
    """

    def __init__(
        self,
        call: BoxedCall,
        example_inputs: Sequence[Any],
        static_input_indices: Iterable[int] | None = None,
        *,
        also_static: Iterable[int] = (),
        mutated_input_indices: Iterable[int] = (),
        clone_outputs: bool = True,
        pool: Any = None,
        launches: int | None = None,
        input_buffers: Mapping[int, torch.Tensor] | None = None,
        static_outputs: Iterable[int] | str = (),
        borrow_inputs: bool = False,
        hold_outputs: bool = True,
        indirect: Any = None,
        device: torch.device | None = None,
        lazy_clones: bool = False,
    ) -> None:
        import torch

        self._call = call
        self.uncaptured_calls = 0
        self._logged_uncaptured = False
        self._collected = False  # gc.collect() tried once against outputs in use (__call__)
        self._liveness: StorageLiveness | None = None
        self._lazy: LazyOutputs | None = None
        self._alias_idx: tuple[int, ...] = ()
        self.clone_outputs = clone_outputs
        self.hold_outputs = hold_outputs
        self.handouts: Handouts | None = None
        self.consumed: tuple[int, ...] = ()
        # hold_outputs=False: input index -> (lender, its output index) for borrowed inputs;
        # slots of the copied inputs' buffers allocated inside the capture, and tensors over them;
        # per earlier member of the pool, its outputs referenced when this runner was captured
        self._lent: dict[int, tuple[CudaGraphRunner, int]] = {}
        self._in_slots: dict[int, Slot] = {}
        self._in_views: dict[int, torch.Tensor] = {}
        self._input_meta: dict[int, tuple[tuple[int, ...], tuple[int, ...], torch.dtype]] = {}
        self._protected: list[tuple[weakref.ref[CudaGraphRunner], frozenset[int]]] = []
        self._param_outputs: frozenset[int] = frozenset()  # outputs over a static input's memory
        self._consumed_groups: list[tuple[int, CudaGraphRunner, int, tuple[int, ...]]] = []
        if not hold_outputs:
            if input_buffers:
                raise ValueError("input_buffers cannot be combined with hold_outputs=False")
            static_outputs = FRESH
        inputs = list(example_inputs)
        self._n = len(inputs)
        self.device = _one_cuda_device(inputs, device)
        tensor_idx = [i for i, x in enumerate(inputs) if isinstance(x, torch.Tensor)]
        if static_input_indices is None:
            static = {i for i in tensor_idx if isinstance(inputs[i], torch.nn.Parameter)}
        else:
            static = set(static_input_indices)
        static |= set(also_static)
        bad = sorted(i for i in static if i not in tensor_idx)
        if bad:
            raise ValueError(f"static inputs {bad} are not tensor inputs")
        self.static_indices: tuple[int, ...] = tuple(sorted(static))
        self._indirect = indirect
        self.indirect_indices: tuple[int, ...] = tuple(indirect.indices) if indirect is not None else ()
        bad = sorted(i for i in self.indirect_indices if i not in tensor_idx or i in static or i in (input_buffers or {}))
        if bad:
            raise ValueError(f"indirect inputs {bad} must be tensor inputs neither static nor borrowed")
        borrowed = dict(input_buffers or {})
        lender: CudaGraphRunner | None = None
        if borrow_inputs:
            for i in tensor_idx:
                if i not in static and i not in borrowed and i not in self.indirect_indices:
                    found = _owned_static_output(inputs[i], hold_outputs)
                    if found is not None and (lender is None or found[0]._pool == lender._pool):
                        lender = lender or found[0]
                        borrowed[i] = found[1] if found[1] is not None else inputs[i]
                        if not hold_outputs:
                            self._lent[i] = (found[0], found[2])
                    del found
        if borrowed and log.isEnabledFor(logging.DEBUG):
            log.debug("CudaGraphRunner: borrows inputs %s", {i: (self._lent[i][1] if i in self._lent else None,
                                                               _where(inputs[i])) for i in sorted(borrowed)})
        bad = sorted(i for i in borrowed if i in static or i not in tensor_idx)
        if bad:
            raise ValueError(f"input_buffers {bad} must be copied (non-static) tensor inputs")
        self.borrowed: tuple[int, ...] = tuple(sorted(borrowed))
        self._copy_idx: tuple[int, ...] = tuple(i for i in tensor_idx if i not in static
                                                and i not in self.indirect_indices)
        self._scalars: dict[int, Any] = {
            i: x for i, x in enumerate(inputs) if not isinstance(x, torch.Tensor)
        }
        # a graph reading another's static outputs shares its pool (see "Shared pools")
        self._pool: Any = (pool if pool is not None else lender._pool if lender is not None
                           else torch.cuda.graph_pool_handle())

        # 1. warm-up, eagerly, on a side stream, on the example inputs themselves
        versions = {i: inputs[i]._version for i in tensor_idx}
        current = torch.cuda.current_stream(self.device)
        side = _side_stream(self.device)
        side.wait_stream(current)
        _blas_workspace_apart(self.device, side)
        with torch.cuda.device(self.device), torch.cuda.stream(side):
            first = tuple(call(list(inputs)))
        current.wait_stream(side)
        for out in first:
            if isinstance(out, torch.Tensor) and out.is_cuda:
                _record_stream(out, current)  # allocated on `side`, used on `current`
        self.first_outputs: tuple[Any, ...] | None = first
        mutated = {i for i in tensor_idx if inputs[i]._version != versions[i]}
        mutated |= set(mutated_input_indices)
        self.mutated_indices: tuple[int, ...] = tuple(sorted(mutated))
        self._copy_back: tuple[int, ...] = tuple(i for i in self._copy_idx if i in mutated)
        self.graph: torch.cuda.CUDAGraph | None = None
        self._static_outputs: tuple[Any, ...] = ()
        self.capture_error: Exception | None = None
        if launches is not None:
            moved = sum(_nbytes(inputs[i]) for i in self._copy_idx if i not in borrowed)
            keep = set(range(len(first))) if static_outputs == FRESH else set(static_outputs)
            moved += sum(_nbytes(o) for k, o in enumerate(first) if k not in keep) if clone_outputs else 0
            if moved / COPY_BYTES_PER_S >= launches * LAUNCH_S:
                self.capture_error = RuntimeError(
                    f"not worth a CUDA graph: copying {moved} bytes in and out costs more than "
                    f"{launches} launches save")
                log.info("CudaGraphRunner: %s", self.capture_error)
                return

        # 2. static buffers for the copied inputs (hold_outputs=False: only for mutated ones; the
        # others get theirs inside the capture, and a temporary one for the second warm-up)
        self._static_inputs: list[Any] = list(inputs)
        in_capture = set() if hold_outputs else {i for i in self._copy_idx if i not in borrowed and i not in mutated}
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
                        buf.copy_(x)
                else:
                    buf = torch.empty_strided(x.size(), x.stride(), dtype=x.dtype, device=x.device)
                    buf.copy_(x)
                temporary[i] = buf
                self._static_inputs[i] = None if i in in_capture or i in self._lent else buf
                if i in in_capture:
                    self._input_meta[i] = (tuple(x.size()), tuple(x.stride()), x.dtype)
                del x, buf
        self._static_ptrs = {i: inputs[i].data_ptr() for i in self.static_indices}

        # 3. a second warm-up on the static buffers (alignment), unless it would repeat mutations
        if not (mutated & static):
            side.wait_stream(current)
            with torch.cuda.device(self.device), torch.cuda.stream(side):
                call(temporary)
            current.wait_stream(side)
        del temporary
        consumable: dict[int, Any] = {}
        if not hold_outputs:  # the capture gets the only references to the borrowed inputs
            consumable = {i: inputs[i] for i in self._lent}
            inputs.clear()
            borrowed.clear()
            if isinstance(example_inputs, list):
                example_inputs.clear()
        try:
            self._capture(in_capture, consumable)
        except Exception as exc:  # an op that cannot be captured: run eagerly from now on
            self.capture_error = exc
            _generators_out_of_capture()
            log.warning("CudaGraphRunner: capture failed (%s: %s); running without a CUDA graph",
                        type(exc).__name__, exc)
            return
        finally:
            for i in self.indirect_indices:  # read at the caller's address each replay: not kept
                self._static_inputs[i] = None
        if static_outputs == FRESH:  # every tensor output over memory that is not an input's,
            # but one-element outputs (a loss) are held and cloned: a caller keeping the last
            # step's loss then does not stop the next replay (the liveness rule)
            taken = _storage_ids(self._static_inputs)
            outs: tuple[Any, ...] = self._static_outputs
            static_outputs = [k for k, o in enumerate(outs) if isinstance(o, torch.Tensor) and o.numel() > 1
                              and int(o.untyped_storage()._cdata) not in taken]
            del outs
        elif isinstance(static_outputs, str):
            raise ValueError(f"static_outputs must be output indices or {FRESH!r}, not {static_outputs!r}")
        self._alias_idx = tuple(k for k in sorted(set(static_outputs))
                                if isinstance(self._static_outputs[k], torch.Tensor))
        _POOL_MEMBERS.setdefault(self._pool, []).append(weakref.ref(self))
        params = _storage_ids(x for i, x in enumerate(self._static_inputs) if i in static)
        outputs: tuple[Any, ...] = self._static_outputs
        self._param_outputs = frozenset(k for k, t in enumerate(outputs)
                                        if isinstance(t, torch.Tensor) and int(t.untyped_storage()._cdata) in params)
        del outputs
        if self._alias_idx:
            # stable addresses from the first call on: the warm-up result goes into the graph's
            # memory (parameter storages excepted: the graph returns the parameter itself)
            with torch.no_grad():
                for k in self._alias_idx:
                    out = self._static_outputs[k]
                    if int(out.untyped_storage()._cdata) not in params and out.data_ptr() != first[k].data_ptr():
                        out.copy_(first[k])
                    del out
            self.first_outputs = tuple(self._static_outputs[k].detach() if k in self._alias_idx else o
                                       for k, o in enumerate(first))
            if hold_outputs:
                self._liveness = StorageLiveness([self._static_outputs[k] for k in self._alias_idx], exclude=params)
            else:
                self.handouts = Handouts({k: self._static_outputs[k] for k in self._alias_idx})
                held: list[Any] = list(self._static_outputs)
                for k in self._alias_idx:
                    held[k] = None
                self._static_outputs = tuple(held)
            _OWNERS.add(self)
        del first
        if lazy_clones and hold_outputs and clone_outputs:
            self._lazy = _lazy_outputs(self._static_outputs, self._static_inputs, self._alias_idx)
        if not hold_outputs:
            self._after_capture()

    def _after_capture(self) -> None:
        """hold_outputs=False: which borrowed inputs the capture consumed (grouped by the lender's
        storage: the inputs over it and one output index of the lender there), and which outputs
        of the pool's earlier members were referenced (kept out of this runner's memory)."""
        self.consumed = tuple(i for i, (lender, k) in sorted(self._lent.items())
                              if lender.handouts is None or k not in lender.handouts.live())
        groups: dict[int, tuple[CudaGraphRunner, int, list[int]]] = {}
        for i in self.consumed:
            lender, k = self._lent[i]
            assert lender.handouts is not None
            groups.setdefault(lender.handouts.slots[k].storage_ptr, (lender, k, []))[2].append(i)
        self._consumed_groups = [(ptr, lender, k, tuple(idx)) for ptr, (lender, k, idx) in groups.items()]
        for ref in _POOL_MEMBERS.get(self._pool, ()):
            other = ref()
            if other is self:
                break
            if other is not None and other.handouts is not None:
                self._protected.append((ref, frozenset(other.handouts.live())))

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
        _OWNERS.discard(self)

    def _uncaptured(self, inputs: list[Any], why: str) -> tuple[Any, ...]:
        """Run `call` directly for this one call (its outputs are fresh); log the first time."""
        self.uncaptured_calls += 1
        if not self._logged_uncaptured:
            self._logged_uncaptured = True
            log.info("CudaGraphRunner: running a call without the CUDA graph (%s); logged once", why)
        return tuple(self._call(inputs))

    def _handed_out_live(self) -> bool:
        """Whether an output this runner handed out without copying is still referenced."""
        if self.handouts is not None:
            return bool(self.handouts.live())
        return self._liveness is not None and bool(self._liveness.live())

    def _outputs_in_use(self) -> str | None:
        """Why a replay would overwrite outputs still in use (this runner's or a later pool
        member's), or None."""
        if self._handed_out_live():
            return "an output of the previous replay is still referenced"
        if self._later_members_live():
            return "a graph captured later in the same memory pool still has outputs in use"
        return None

    def _later_members_live(self) -> bool:
        """Whether a runner captured after this one in the same pool has handed-out outputs in use
        (they may lie in memory this graph's replay writes)."""
        members = _POOL_MEMBERS.get(self._pool, ())
        later = False
        for ref in members:
            other = ref()
            if other is self:
                later = True
            elif later and other is not None and other._handed_out_live():
                return True
        return False

    def _earlier_members_conflict(self, inputs: list[Any]) -> str | None:
        """hold_outputs=False: why this replay could overwrite memory an earlier member's handed-out
        output still needs (module docstring, "Handed-out outputs"), or None."""
        mine = set()
        for ptr, lender, k, idx in self._consumed_groups:
            assert lender.handouts is not None
            extra = lender.handouts.extra_refs(k)
            if extra is None or extra > len({id(inputs[i]) for i in idx}):
                return f"input {idx[0]}, which this graph overwrites after reading it, is referenced elsewhere"
            mine.add(ptr)
        for ref, protected in self._protected:
            other = ref()
            if other is None or other.handouts is None:
                continue
            for k in other.handouts.live():
                if k not in protected and other.handouts.slots[k].storage_ptr not in mine:
                    return "an output of a graph captured earlier in the pool is in use where this graph's buffers lie"
        return None

    def _capture(self, in_capture: Iterable[int] = (), consumable: dict[int, Any] | None = None) -> None:
        """Capture `call` on the static inputs; `in_capture` inputs get buffers allocated inside the
        capture (from the pool) and `consumable` ones are passed with no reference kept."""
        import torch

        self.graph = None
        self._static_outputs = ()
        torch.cuda.synchronize(self.device)
        graph = torch.cuda.CUDAGraph()
        args = list(self._static_inputs)
        with torch.cuda.device(self.device), expandable_capture(), \
                torch.cuda.graph(graph, pool=self._pool, stream=_side_stream(self.device)):
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

    def __call__(self, inputs: list[Any]) -> tuple[Any, ...]:
        """Replay on `inputs` (same count, shapes and dtypes as the example); clears `inputs`."""
        import torch

        if len(inputs) != self._n:
            raise ValueError(f"CudaGraphRunner: expected {self._n} inputs, got {len(inputs)}")
        if self.capture_error is not None:
            return tuple(self._call(inputs))
        why = self._outputs_in_use()
        if why is not None and not self._collected:
            # outputs held only by a reference cycle die in a collection, and Python's full
            # collections can be rare in a process with many long-lived objects (see the
            # runtime README, "the liveness rule"). Once per runner.
            self._collected = True
            gc.collect()
            why = self._outputs_in_use()
        if why is not None:
            return self._uncaptured(inputs, why)
        static_inputs = self._static_inputs
        for i in self.borrowed:
            src = inputs[i]
            if i in self._lent:
                lender, k = self._lent[i]
                assert lender.handouts is not None
                slot = lender.handouts.slots[k]
                if not (isinstance(src, torch.Tensor) and slot.matches(src)):
                    return self._uncaptured(inputs, f"borrowed input {i} is not at the address the graph reads "
                                                    f"({_where(src)}; the graph reads output {k} of its lender "
                                                    f"at {_view(slot.data_ptr, slot.size, slot.stride, slot.dtype)})")
                continue
            dst = static_inputs[i]
            if src.data_ptr() != dst.data_ptr() or src.stride() != dst.stride():
                return self._uncaptured(inputs, f"borrowed input {i} is not at the address the graph reads "
                                                f"({_where(src)}; the graph reads {_where(dst)})")
        if not self.hold_outputs:
            why = self._earlier_members_conflict(inputs)
            if why is not None:
                return self._uncaptured(inputs, why)
        _after_last_replay(self.device)  # before this call writes memory an earlier replay reads
        moved = [i for i in self.static_indices if inputs[i].data_ptr() != self._static_ptrs[i]]
        if self._in_slots and not self._in_views:
            self._in_views = _tensors_over(self._in_slots)
        for i in self._copy_idx:
            src = inputs[i]
            if i in self.borrowed:
                continue
            dst = self._in_views[i] if i in self._in_slots else static_inputs[i]
            if src.data_ptr() == dst.data_ptr() and src.stride() == dst.stride():
                continue
            if src.shape != dst.shape or src.dtype != dst.dtype:
                raise ValueError(
                    f"CudaGraphRunner: input {i} is {tuple(src.shape)} {src.dtype}, the graph was "
                    f"captured for {tuple(dst.shape)} {dst.dtype}"
                )
            dst.copy_(src)
        for i, value in self._scalars.items():
            if inputs[i] is not value and inputs[i] != value:
                raise ValueError(
                    f"CudaGraphRunner: input {i} is {inputs[i]!r}, the graph was captured with "
                    f"{value!r}"
                )
        if moved:
            # a parameter was replaced (model.to(), a new tensor): re-capturing measured wrong
            # results on an H200 (torch 2.11), so the runner stops replaying and runs `call`
            self._stop_replays(f"static inputs {moved} moved after capture")
            return tuple(self._call(inputs))
        if self._indirect is not None:
            layouts = self._indirect.layouts
            for i in self.indirect_indices:
                src = inputs[i]
                size, _, dtype = layouts[i]
                if not isinstance(src, torch.Tensor) or tuple(src.shape) != tuple(size) or src.dtype != dtype:
                    raise ValueError(f"CudaGraphRunner: input {i} is {_where(src)}, the graph was captured "
                                     f"for {list(size)} {dtype}")
            self._indirect.prepare(inputs)  # their addresses into the table the kernels read
        lazy = self._lazy
        if lazy is not None and lazy.resized():
            self._stop_replays("a caller resized an output it was handed, and with it the graph's static output")
            return tuple(self._call(inputs))
        if lazy is not None:  # the last call's outputs still in use: copied away, or no replay
            why = lazy.free()
            if why is not None:
                return self._uncaptured(inputs, why)
        keep = [inputs[i] for i in self._copy_back]
        inputs.clear()
        graph = self.graph
        assert graph is not None
        graph.replay()
        for i, dst in zip(self._copy_back, keep, strict=True):
            dst.copy_(static_inputs[i])
        alias = self._alias_idx
        if not self.hold_outputs:  # outputs over a parameter's memory: the graph's own, as uncaptured
            fresh = self.handouts.replayed() if self.handouts is not None else {}
            return tuple(fresh[k] if k in fresh else o if k in self._param_outputs
                         else o.clone() if isinstance(o, torch.Tensor) else o
                         for k, o in enumerate(self._static_outputs))
        if not self.clone_outputs:
            return tuple(o.detach() if k in alias else o for k, o in enumerate(self._static_outputs))
        lazily = lazy.hand_out() if lazy is not None and lazy.enabled else {}
        return tuple(lazily[k] if k in lazily else o.detach() if k in alias
                     else o.clone() if isinstance(o, torch.Tensor) else o
                     for k, o in enumerate(self._static_outputs))


def cudagraphify(
    call: BoxedCall,
    static_input_indices: Iterable[int] | None = None,
    *,
    also_static: Iterable[int] = (),
    mutated_input_indices: Iterable[int] = (),
    clone_outputs: bool = True,
    pool: Any = None,
    launches: int | None = None,
    static_outputs: Iterable[int] | str = (),
    borrow_inputs: bool = False,
    hold_outputs: bool = True,
    indirect: Any = None,
    device: torch.device | None = None,
    lazy_clones: bool = False,
) -> Callable[[list[Any]], tuple[Any, ...]]:
    """A boxed callable running `call` through a `CudaGraphRunner` built at its first call.

    The first call warms up on its inputs and returns that (eager) result, then captures; later
    calls replay. Arguments as for `CudaGraphRunner`.
    """
    static = None if static_input_indices is None else tuple(static_input_indices)
    also = tuple(also_static)
    mutated = tuple(mutated_input_indices)
    keep = static_outputs if isinstance(static_outputs, str) else tuple(static_outputs)
    runner: CudaGraphRunner | None = None

    def run(args: list[Any]) -> tuple[Any, ...]:
        nonlocal runner
        if runner is None:
            runner = CudaGraphRunner(call, args, static, also_static=also, mutated_input_indices=mutated,
                                     clone_outputs=clone_outputs, pool=pool, launches=launches,
                                     static_outputs=keep, borrow_inputs=borrow_inputs,
                                     hold_outputs=hold_outputs, indirect=indirect, device=device,
                                     lazy_clones=lazy_clones)
            first = runner.first_outputs
            runner.first_outputs = None
            args.clear()
            assert first is not None
            return first
        return runner(args)

    return run


def _storage_ids(xs: Iterable[Any]) -> set[int]:
    """The storages (`untyped_storage()._cdata`) of the tensors among `xs`."""
    import torch

    return {int(x.untyped_storage()._cdata) for x in xs if isinstance(x, torch.Tensor)}


def _lazy_outputs(outputs: Sequence[Any], static_inputs: Sequence[Any], held: Iterable[int]) -> LazyOutputs | None:
    """`lazy_clones`: the outputs handed out uncloned (`coil.runtime.lazy_outputs`), or None when
    there is none. Not: outputs handed out under `static_outputs` (`held`), outputs over an input's
    memory (a parameter, a copied input's buffer: as before, cloned), and outputs a plain tensor
    over their storage would misread (a lazy conjugate or negative bit, a subclass, a non-strided
    layout)."""
    import torch

    inputs = _storage_ids(static_inputs)
    skip = set(held)
    chosen = {k: o for k, o in enumerate(outputs)
              if type(o) is torch.Tensor and k not in skip and o.layout == torch.strided and not o.is_conj()
              and not o.is_neg() and int(o.untyped_storage()._cdata) not in inputs}
    return LazyOutputs(chosen) if chosen else None


def _owned_static_output(x: torch.Tensor, hold_outputs: bool = True
                         ) -> tuple[CudaGraphRunner, torch.Tensor | None, int] | None:
    """The live runner whose handed-out output `x` is, that output (None for a runner that does
    not hold its outputs) and its index; or None. With `hold_outputs=False` only runners of that
    mode whose outputs are still the capture's own tensors lend (module docstring)."""
    for owner in list(_OWNERS):
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


_SIDE_STREAMS: dict[int, Any] = {}
_BLAS_READY: set[tuple[int, int]] = set()  # (thread, device) whose side-stream cuBLAS workspace exists
_LAST_REPLAY: dict[int, Any] = {}  # device index -> the stream of the last replay on it


def _after_last_replay(device: torch.device) -> None:
    """Order the current stream after the last replay on `device` when that ran on another stream.

    A replay writes graph memory from the current stream before the graph runs: copied inputs into
    their static buffers, a pointer table's addresses, and then the static outputs and pool memory
    the graph itself writes. An earlier replay enqueued on another stream may still be reading or
    writing the same memory (its static inputs, the table, the pool's buffers, a clone of its
    outputs), and nothing else orders the two streams. So a call from a new stream waits for all
    the work enqueued on the last one (`Stream.wait_stream`, an event on the GPU; the host does not
    block). Calls that stay on one stream, the usual case, pay one comparison."""
    import torch

    current = torch.cuda.current_stream(device)
    key = current.device_index
    last = _LAST_REPLAY.get(key)
    if last is not None and last != current:
        current.wait_stream(last)
    _LAST_REPLAY[key] = current


def _blas_workspace_apart(device: torch.device, side: torch.cuda.Stream) -> None:
    """Make this thread's cuBLAS workspace for `side` (torch allocates one per handle and stream,
    at the first matmul, and keeps it for the process's life) in a segment of its own, once per
    thread and device, before a warm-up runs there.

    Allocated during a warm-up instead, it landed in whatever free block the side stream had
    cached from an earlier runner's warm-up: on GPT-2's AMP training step the backward's
    workspace (the autograd engine's thread: a handle of its own) took 32 MiB of a 198 MiB
    segment of the forward's freed warm-up buffers, which `empty_cache` then could not release:
    166 MiB more reserved for good (H100, docs/perf.md, session 16). So the cached free blocks
    are released first (`empty_cache`, first calls only) and the workspace is made right away."""
    import threading

    import torch

    index = device.index if device.index is not None else torch.cuda.current_device()
    key = (threading.get_ident(), index)
    if key in _BLAS_READY or torch.cuda.is_current_stream_capturing():
        return
    _BLAS_READY.add(key)
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    with torch.cuda.device(device), torch.cuda.stream(side):
        torch.cuda.current_blas_handle()  # type: ignore[no-untyped-call]


def _generators_out_of_capture() -> None:
    """After a failed capture: every CUDA device's default generator gets a copy of its state
    (same seed and offset) that is not marked as capturing. When an op invalidates a capture (a
    host sync, a cuSOLVER info check), torch 2.11's `CUDAGraph.capture_end` raises at
    cudaStreamEndCapture before its generator epilogue, and the generator stays marked: every
    later random op in the process failed with "Offset increment outside graph capture
    encountered unexpectedly" (seen in the GPU OpInfo sweep, `bench/gpu_session18h.sh`)."""
    import torch

    for gen in torch.cuda.default_generators:
        try:
            gen.graphsafe_set_state(gen.clone_state())
        except (AttributeError, RuntimeError) as exc:  # an older torch without graph-safe states
            log.debug("CudaGraphRunner: generator state not replaced (%s)", exc)


def _record_stream(t: torch.Tensor, stream: torch.cuda.Stream) -> None:
    """`t.record_stream(stream)`, also for a tensor with a lazy conjugate or negative bit (an
    fft's output can be a conjugate view), where torch 2.11's record_stream fails with "Expected
    Tensor but got None": the bit is dropped through a view over the same memory, which is what
    the caching allocator tracks."""
    import torch

    if t.is_conj():
        t = t.conj()  # the conjugate of a conjugate view: the same memory, the bit cleared
    if t.is_neg():
        t = torch._neg_view(t)
    t.record_stream(stream)


def _side_stream(device: torch.device) -> torch.cuda.Stream:
    """The side stream every runner on `device` warms up and captures on (module docstring)."""
    import torch

    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _SIDE_STREAMS:
        _SIDE_STREAMS[index] = torch.cuda.Stream(index)  # type: ignore[no-untyped-call]
    stream: torch.cuda.Stream = _SIDE_STREAMS[index]
    return stream


def _where(x: object) -> str:
    """`x`'s address and view, for messages: `0x7f00 [32, 64] stride [64, 1] torch.bfloat16`."""
    import torch

    if not isinstance(x, torch.Tensor):
        return f"not a tensor: {type(x).__name__}"
    return _view(x.data_ptr(), x.shape, x.stride(), x.dtype)


def _view(ptr: int, size: Sequence[int], stride: Sequence[int], dtype: torch.dtype) -> str:
    """An address and a view of memory, as `_where` prints a tensor's."""
    return f"{ptr:#x} {list(size)} stride {list(stride)} {dtype}"


def _nbytes(x: object) -> int:
    import torch

    return x.numel() * x.element_size() if isinstance(x, torch.Tensor) else 0


def _one_cuda_device(inputs: list[Any], default: torch.device | None = None) -> torch.device:
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
