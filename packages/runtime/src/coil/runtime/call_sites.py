"""One CUDA graph per call site of a compiled graph: `cudagraphify`.

A compiled graph is often called with several sets of parameters: a transformer layer's graph
once per layer when Dynamo breaks the graph between layers (HF's BART and OPT in training), a
block compiled on its own. A `CudaGraphRunner` captures one set of static-input addresses, so
this module keeps a runner per *site*, and decides when a site captures and into which memory
pool (the rules are `cudagraphify`'s docstring; the runner's own in `coil.runtime.cudagraph`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any

from coil.runtime.cudagraph import BoxedCall, CudaGraphRunner
from coil.runtime.cudagraph_options import CaptureSpec, ReplayPolicy
from coil.runtime.graph_inputs import input_roles

__all__ = ["MAX_SITES", "cudagraphify"]

log = logging.getLogger("coil.runtime")

# call sites (sets of static-input addresses) one compiled graph captures before it runs new
# ones uncaptured: a graph per layer of the deepest models people run, with room to spare
MAX_SITES = 256


def cudagraphify(call: BoxedCall, spec: CaptureSpec | None = None, policy: ReplayPolicy | None = None,
                 max_sites: int = MAX_SITES, by_shape: bool = False) -> Callable[[list[Any]], tuple[Any, ...]]:
    """A boxed callable running `call` through `CudaGraphRunner`s, one per call site.

    A site is the addresses of the static inputs (parameters, module buffers, a backward's saved
    parameters): one compiled graph is often called with several sets of them, e.g. a transformer
    layer's graph once per layer when Dynamo breaks the graph between layers, or a block compiled
    on its own. With `by_shape` (a graph with symbolic sizes) a site is also the shapes of the
    tensor inputs and the values of the others (the sizes themselves): a capture per size met.

    The first site captures at its first call: it warms up on its inputs and returns that (eager)
    result, then captures; later calls replay. Any other site runs `call` directly at its first
    call and captures when it comes back with the very same static tensors (the same storages,
    not new tensors the allocator put at the same addresses), so a static input made anew each
    call is never captured. A site met with other storages at its addresses before it captured
    is keyed by the storages too from then on: FSDP2 gathers each layer's parameters into the
    memory the last layer freed, and each layer then captures a graph of its own (the addresses
    it reads are the same; the outputs it hands out are its own). Static inputs that come back as
    the storages of a built site at other addresses (re-allocated in place: FSDP2 frees a layer's
    gathered parameters with `resize_` and gathers them again wherever the allocator has room)
    would make a new site every call: its static inputs stop being static (all of them: a layer's
    other gathered parameters move at other calls). The graph drops its runners and starts again
    with them as copied inputs (copied into the graph's memory at each replay, as any activation
    is); a site is then their storages (which layer's tensors they are, wherever they lie), so
    each layer still captures a graph of its own and hands out outputs of its own (logged once).
    With `policy.borrow_inputs` (training graphs) the first site waits for its second call too: a
    step's graphs are then captured together in the second step, and each backward reads its
    forward's captured outputs in place (captured while its forward ran uncaptured, it would copy
    them in every replay).

    A new site captures into the first site's memory pool (a borrowing runner into its lender's),
    so the sites' scratch memory is held once, not once per site, and the pool rules of this
    module keep one site's replay from overwriting what another handed out; but not into a pool
    where a graph that hands its outputs out has replayed and still has outputs in use
    (`graph_pools.open_to_captures`): those lie in memory the caching allocator counts as free,
    so the site takes a new pool and borrows nothing from there. Past `max_sites` sites, a call
    at a new site runs `call` directly (logged once). When the first site cannot be captured (the
    capture failed, or it is not worth it), no other site is tried.

    `spec` and `policy` as for `CudaGraphRunner`. A graph whose tensor inputs are not all on one
    CUDA device (a CPU scalar tensor beside CUDA ones) runs uncaptured, said once in the log: a
    replay would not read host memory again.
    """
    return _CallSites(call, spec, ReplayPolicy() if policy is None else policy, max_sites, by_shape)


class _CallSites:
    """`cudagraphify`'s callable: its sites, the sites met once, and whether it stopped capturing."""

    def __init__(self, call: BoxedCall, spec: CaptureSpec | None, policy: ReplayPolicy, max_sites: int,
                 by_shape: bool) -> None:
        self.call, self.spec, self.policy, self.max_sites, self.by_shape = call, spec, policy, max_sites, by_shape
        self.sites: dict[tuple[Any, ...], CudaGraphRunner] = {}
        self.keyed: tuple[int, ...] | None = None  # the static inputs' indices, known at the first call
        self.first: CudaGraphRunner | None = None
        self.uncaptured = False
        self.logged_full = False
        self.seen: dict[tuple[Any, ...], tuple[int, ...]] = {}  # sites met once -> their static storages
        self.shared: set[tuple[Any, ...]] = set()  # sites met with other storages at the same addresses
        self.built_at: dict[tuple[int, ...], tuple[int, ...]] = {}  # built sites' static storages -> addresses
        self.demoted: tuple[int, ...] = ()  # former static inputs, copied in; their storages key the sites

    def _build(self, args: list[Any], site: tuple[Any, ...], storages: tuple[int, ...],
               ptrs: tuple[int, ...]) -> tuple[Any, ...]:
        first = self.first
        site_policy = self.policy if first is None else dataclasses.replace(self.policy, pool=first._pool)
        runner = CudaGraphRunner(self.call, args, self.spec, site_policy)
        self.sites[site] = runner
        self.built_at[storages] = ptrs
        if first is None:
            self.first = runner
        elif len(self.sites) == 2 or log.isEnabledFor(logging.DEBUG):
            log.info("CudaGraphRunner: captured again for another call site (static inputs at new addresses%s); "
                     "%d sites", " or new sizes" if self.by_shape else "", len(self.sites))
        out = runner.first_outputs
        runner.first_outputs = None
        args.clear()
        assert out is not None
        return out

    def _storages(self, args: list[Any], indices: tuple[int, ...] | None = None) -> tuple[int, ...]:
        """The storages (`_cdata`) of `args` at `indices`, by default the static inputs."""
        if indices is None:
            assert self.keyed is not None
            indices = self.keyed
        return tuple(int(args[i].untyped_storage()._cdata) for i in indices)

    def _ptrs(self, args: list[Any]) -> tuple[int, ...]:
        assert self.keyed is not None
        return tuple([args[i].data_ptr() for i in self.keyed])

    def _site(self, args: list[Any], ptrs: tuple[int, ...]) -> tuple[Any, ...]:
        """The call site of `args`, whose static inputs are at `ptrs`."""
        site: tuple[Any, ...] = ptrs
        if self.demoted:  # which layer's tensors these are, wherever they lie now
            site += self._storages(args, self.demoted)
        if self.by_shape:
            import torch

            site += tuple(a.shape if isinstance(a, torch.Tensor)  # a torch.Size: hashed as its tuple
                          else a if isinstance(a, (int, float, bool, type(None))) else id(a) for a in args)
        return (site, self._storages(args)) if self.shared and site in self.shared else site

    def _stop(self, args: list[Any], why: str) -> tuple[Any, ...]:
        """No captures from now on: this call and every later one run `call` directly."""
        log.info("not captured as a CUDA graph: %s", why)
        self.uncaptured, self.first = True, None
        self.sites.clear()
        self.seen.clear()
        return tuple(self.call(args))

    def _demote(self, args: list[Any], moved: list[int]) -> tuple[Any, ...]:
        """Static inputs `moved` came back at new addresses as the same tensors: every static
        input is a copied input from now on (the others are gathered the same way and move at
        other calls), every runner dropped, the sites keyed by the demoted inputs' storages; this
        call then goes through as a first call. Happens once: no static input is left."""
        assert self.keyed is not None
        log.info("CudaGraphRunner: static inputs %s came back at new addresses as the same tensors (storage "
                 "re-allocated in place, as FSDP2 does); all %d static inputs are copied into the graph's memory "
                 "at each replay from now on", moved, len(self.keyed))
        self.demoted, self.keyed = self.keyed, ()
        self.spec = dataclasses.replace(self.spec or CaptureSpec(), static_input_indices=(), also_static=())
        self.first = None
        for table in (self.sites, self.seen, self.built_at):
            table.clear()
        self.shared.clear()
        return self(args)

    def __call__(self, args: list[Any]) -> tuple[Any, ...]:
        if self.uncaptured:
            return tuple(self.call(args))
        if self.keyed is None:
            import torch

            devices = sorted({str(a.device) for a in args if isinstance(a, torch.Tensor)})
            if len(devices) > 1:
                return self._stop(args, f"its tensor inputs are on {', '.join(devices)}")
            self.keyed = input_roles(args, self.spec or CaptureSpec(), self.policy.input_buffers).static
        ptrs = self._ptrs(args)
        site = self._site(args, ptrs)
        runner = self.sites.get(site)
        if runner is not None:
            return runner._run(args, statics_checked=runner.static_indices == self.keyed)
        return self._new_site(args, site, ptrs)

    def _new_site(self, args: list[Any], site: tuple[Any, ...], ptrs: tuple[int, ...]) -> tuple[Any, ...]:
        """A call at a site without a runner: run directly, or build the site's runner."""
        if self.first is not None and self.first.capture_error is not None:
            return self.first(args)
        if len(self.sites) >= self.max_sites:
            if not self.logged_full:
                self.logged_full = True
                log.warning("CudaGraphRunner: %d call sites captured already; a call at a new site runs "
                            "without a CUDA graph (logged once)", self.max_sites)
            return tuple(self.call(args))
        storages = self._storages(args)
        built = self.built_at.get(storages, ptrs)
        if built != ptrs:  # a built site's static tensors, re-allocated
            assert self.keyed is not None
            return self._demote(args, [i for i, a, b in zip(self.keyed, built, ptrs, strict=True) if a != b])
        if self.first is not None or self.policy.borrow_inputs:  # captured when the same tensors come back
            before = self.seen.get(site)
            if before != storages:
                if len(self.seen) >= self.max_sites:
                    self.seen.clear()
                    self.shared.clear()
                if before is not None and site not in self.shared:
                    # other tensors at these addresses (FSDP2 gathers each layer's parameters into
                    # the memory the last layer freed): from now on the storages are the site too
                    self.shared.add(site)
                    self.seen[(site, before)] = before
                    site = (site, storages)
                self.seen[site] = storages
                return tuple(self.call(args))
            del self.seen[site]
        return self._build(args, site, storages, ptrs)
