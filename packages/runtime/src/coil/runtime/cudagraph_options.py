"""What a `CudaGraphRunner` is told: the captured graph's facts and the replay policy.

`CaptureSpec` describes the call being captured: which inputs it uses in place, which it writes
without moving `Tensor._version`, which it reads through a pointer table, its device when no input
is a tensor, and how many launches one call makes. `ReplayPolicy` says how a runner hands its
outputs out and shares memory with other runners. Both are frozen and validated on construction
(iterables become tuples); the rules they switch on are in `coil.runtime.cudagraph`'s docstring.

The worth-it rule (`CaptureSpec.launches`) is here too: a graph is captured only when copying its
copied inputs in and its cloned outputs out costs less than the launch time its replay saves.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

# `ReplayPolicy.static_outputs=FRESH`: hand out every tensor output whose memory is not an input's
FRESH = "fresh"
# The worth-it rule's rates: tensor bytes a device-to-device copy moves per second (it reads and
# writes each byte: half the device's copy bandwidth), and the launch time one kernel or extern
# call replayed from a graph saves (coil's fast launch path). docs/perf.md has the figures.
COPY_BYTES_PER_S = 2e12
LAUNCH_S = 5e-6


def copies_outweigh_launches(moved_bytes: int, launches: int) -> bool:
    """The worth-it rule: True when copying `moved_bytes` in and out of the graph's static memory
    takes at least as long as the `launches` a replay saves (then the runner does not capture)."""
    return moved_bytes / COPY_BYTES_PER_S >= launches * LAUNCH_S


@dataclass(frozen=True)
class CaptureSpec:
    """The facts of the call a runner captures.

    Args:
        static_input_indices: inputs used in place by the graph (parameters, buffers); None
            means every `nn.Parameter` among the inputs.
        also_static: more inputs used in place, besides `static_input_indices` (a module's
            buffers); like those, each must stay at its address (a moved one stops the replays).
        mutated_input_indices: inputs the call writes into without moving `Tensor._version`
            (a Triton kernel's stores).
        indirect: the wrapper's pointer table (`call.indirect`: `indices`, the inputs it reads;
            `layouts`, index -> (size, stride, dtype); `prepare(inputs)`), or None.
        device: the CUDA device of a graph whose inputs hold no tensor (one of factory ops
            only); ignored when they do.
        launches: the launches (kernels and extern calls) one call makes, for the worth-it rule
            (`copies_outweigh_launches`); None captures whatever the copies cost.
    """

    static_input_indices: tuple[int, ...] | None = None
    also_static: tuple[int, ...] = ()
    mutated_input_indices: tuple[int, ...] = ()
    indirect: Any = field(default=None, compare=False)
    device: torch.device | None = None
    launches: int | None = None

    def __post_init__(self) -> None:
        if self.static_input_indices is not None:
            object.__setattr__(self, "static_input_indices", tuple(self.static_input_indices))
        object.__setattr__(self, "also_static", tuple(self.also_static))
        object.__setattr__(self, "mutated_input_indices", tuple(self.mutated_input_indices))
        if self.launches is not None and self.launches < 0:
            raise ValueError(f"CaptureSpec.launches must be >= 0, got {self.launches}")


@dataclass(frozen=True)
class ReplayPolicy:
    """How a runner hands out its outputs and shares memory with other runners.

    Args:
        clone_outputs: return clones of the graph's outputs (True) or the graph's own tensors.
        static_outputs: output indices returned as new tensor objects over the graph's static
            outputs instead of clones, guarded by the liveness rule; or `FRESH`: every tensor
            output of more than one element whose memory is not an input's.
        hold_outputs: False hands every output out without holding it ("Handed-out outputs");
            `static_outputs` is then `FRESH` and `clone_outputs` is ignored.
        lazy_clones: with `clone_outputs` and `hold_outputs`, hand the outputs out uncloned and
            copy away before a replay only those the caller still holds (`coil.runtime.lazy_outputs`).
        pool: a memory pool handle (`torch.cuda.graph_pool_handle()`) to share with other graphs;
            a runner that borrows from a lender captures into the lender's pool instead.
        borrow_inputs: borrow copied inputs that are another runner's live static outputs.
        input_buffers: input index -> the tensor to use as that input's static buffer (borrowed
            memory); not with `hold_outputs=False`.
    """

    clone_outputs: bool = True
    static_outputs: tuple[int, ...] | str = ()
    hold_outputs: bool = True
    lazy_clones: bool = False
    pool: Any = field(default=None, compare=False)
    borrow_inputs: bool = False
    input_buffers: Mapping[int, torch.Tensor] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.static_outputs, str):
            if self.static_outputs != FRESH:
                raise ValueError(f"static_outputs must be output indices or {FRESH!r}, not {self.static_outputs!r}")
        else:
            object.__setattr__(self, "static_outputs", tuple(self.static_outputs))
        if not self.hold_outputs and self.input_buffers:
            raise ValueError("input_buffers cannot be combined with hold_outputs=False")

    @property
    def handed_out(self) -> tuple[int, ...] | str:
        """The static outputs in effect: `FRESH` when outputs are not held."""
        return self.static_outputs if self.hold_outputs else FRESH
