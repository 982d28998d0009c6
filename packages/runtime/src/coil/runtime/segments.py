"""Run a segmented wrapper: CUDA-graph replays of the capturable parts, the rest eagerly.

A graph with steps a CUDA graph cannot capture (coil.scheduler.capture: data-dependent shapes,
host syncs, CPU tensors, ...) is emitted with a segment plan (`call.segments`, see
coil.wrapper_codegen's `emit_python`): a dict with

- `inputs`: the graph input names in order (None for an unused input);
- `segments`: per segment a dict: `fn` (a boxed callable taking the values of `inputs` in order,
  clearing the list, returning the values of `outputs` in order), `capture` (a CUDA graph may
  capture it), `inputs`, `outputs`, `launches` (kernel and extern calls), `why` (an eager
  segment's reasons);
- `returns`: per graph output `('ref', name)` or `('value', literal)`.

`SegmentedRunner(plan, capture=...)` runs it as a boxed callable. It keeps the values by name
for one call and drops its reference to a name right before the last segment that reads it
(which then frees it when it is done), so a buffer made by segment 1 and read by segment 3 lives
until segment 3 has run, and not longer.

With `capture=True` (CUDA), each capturable segment gets its own `CudaGraphRunner`, built at the
first call (which runs eagerly as the runners' warm-ups and returns that result):

- graph inputs that are `nn.Parameter`s (or listed in `static_input_indices`), and those in
  `also_static` (a module's buffers), are static inputs;
- a value made by an earlier captured segment is a *borrowed* input: the later graph reads the
  earlier graph's static output in place, no copy (`ReplayPolicy(input_buffers=...)`); if the
  producer ran uncaptured for a call, the consumer does too for that call;
- values made by an eager segment, and other graph inputs, are copied into static buffers;
- segment runners return their static outputs uncloned (`clone_outputs=False`): segments inside
  one call consume them before the next replay. The values returned to the caller follow
  CudaGraphRunner's aliasing rule: with `clone_outputs=True` (default) every returned tensor
  whose storage belongs to a captured segment (its static outputs or input buffers) is cloned;
- the worth-it rule (`launches=`) applies per segment: a segment whose copies cost more than its
  launches save runs uncaptured.

With `capture=False` every segment runs directly (any device): the segment split itself, checked
against the unsegmented wrapper and eager on the CPU.

`report` (a list, when given) receives one line per segment after the first call: `captured`,
`eager (<why>)` or `uncaptured (<capture error>)`; `captured_segments` counts the first.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from coil.runtime.cudagraph import CudaGraphRunner
from coil.runtime.cudagraph_options import CaptureSpec, ReplayPolicy

log = logging.getLogger("coil.runtime")


class SegmentedRunner:
    """A boxed callable running a segment plan (see the module docstring).

    Args:
        plan: the `call.segments` dict of a segmented wrapper.
        capture: replay capturable segments as CUDA graphs (True) or run every segment directly.
        static_input_indices: graph inputs used in place by the graphs; None means every
            `nn.Parameter` among the inputs.
        also_static: more graph inputs used in place (a module's buffers).
        clone_outputs: clone returned tensors that live in a captured segment's memory.
        report: a list that receives one status line per segment after the first call.
    """

    def __init__(self, plan: Mapping[str, Any], *, capture: bool,
                 static_input_indices: Iterable[int] | None = None, also_static: Iterable[int] = (),
                 clone_outputs: bool = True, report: list[str] | None = None) -> None:
        self._inputs: tuple[str | None, ...] = tuple(plan["inputs"])
        self._segments: list[Mapping[str, Any]] = list(plan["segments"])
        self._returns: tuple[tuple[str, Any], ...] = tuple(plan["returns"])
        self.capture = capture
        self.clone_outputs = clone_outputs
        self._static_arg_idx = None if static_input_indices is None else set(static_input_indices)
        self._also_static = set(also_static)
        self._report = report
        returned = {v for kind, v in self._returns if kind == "ref"}
        last: dict[str, int] = {}
        for k, seg in enumerate(self._segments):
            for n in seg["inputs"]:
                last[n] = k
        self._drop_before: list[list[str]] = [[] for _ in self._segments]
        for n, k in last.items():
            if n not in returned:
                self._drop_before[k].append(n)
        self._needed = set(last) | returned
        self._producer: dict[str, int] = {}
        for k, seg in enumerate(self._segments):
            for n in seg["outputs"]:
                self._producer[n] = k
        self._runners: dict[int, CudaGraphRunner] = {}
        self._direct: dict[int, str] = {}  # capturable segments run directly, and why
        self._static_storages: set[int] = set()
        self._first = True

    @property
    def captured_segments(self) -> int:
        """Segments replayed as CUDA graphs (after the first call)."""
        return sum(1 for r in self._runners.values() if r.graph is not None)

    def _static_graph_inputs(self, args: list[Any]) -> set[str]:
        import torch

        if self._static_arg_idx is not None:
            idx = self._static_arg_idx
        else:
            idx = {i for i, a in enumerate(args) if isinstance(a, torch.nn.Parameter)}
        idx = idx | self._also_static
        return {n for i, n in enumerate(self._inputs) if n is not None and i in idx}

    def __call__(self, args: list[Any]) -> tuple[Any, ...]:
        """Run every segment in order on the boxed `args` (cleared); return the graph outputs."""
        if len(args) != len(self._inputs):
            raise ValueError(f"SegmentedRunner: expected {len(self._inputs)} inputs, got {len(args)}")
        static_names = self._static_graph_inputs(args) if self._first and self.capture else set()
        env: dict[str, Any] = {n: a for n, a in zip(self._inputs, args, strict=True)
                               if n is not None and n in self._needed}
        args.clear()
        for k, seg in enumerate(self._segments):
            vals = [env[n] for n in seg["inputs"]]
            for n in self._drop_before[k]:
                del env[n]
            if not (self.capture and seg["capture"]) or k in self._direct:
                outs = seg["fn"](vals)
            elif k in self._runners:
                outs = self._runners[k](vals)
            else:
                outs = self._build(k, seg, vals, static_names)
            env.update(zip(seg["outputs"], outs, strict=True))
        result = tuple(env[v] if kind == "ref" else v for kind, v in self._returns)
        if self._first:
            self._first = False
            self._finish_first_call()
            return result  # warm-up results: fresh tensors
        if self.clone_outputs and self._static_storages:
            result = tuple(self._clone_if_static(v) for v in result)
        return result

    def _build(self, k: int, seg: Mapping[str, Any], vals: list[Any], static_names: set[str]) -> tuple[Any, ...]:
        """The first call of captured segment `k`: build its runner (warm-up result returned)."""
        import torch

        names = list(seg["inputs"])
        if not any(isinstance(v, torch.Tensor) for v in vals):
            self._direct[k] = "no tensor input"
            return tuple(seg["fn"](vals))
        static = [i for i, n in enumerate(names) if n in static_names]
        buffers = {}
        for i, n in enumerate(names):
            j = self._producer.get(n)
            producer = self._runners.get(j) if j is not None else None
            if j is not None and producer is not None and producer.graph is not None:
                buffers[i] = producer.graph_outputs[list(self._segments[j]["outputs"]).index(n)]
        spec = CaptureSpec(static_input_indices=tuple(static), launches=seg["launches"])
        runner = CudaGraphRunner(seg["fn"], vals, spec, ReplayPolicy(clone_outputs=False, input_buffers=buffers))
        self._runners[k] = runner
        first = runner.first_outputs
        runner.first_outputs = None
        assert first is not None
        return first

    def _finish_first_call(self) -> None:
        import torch

        lines = []
        for k, seg in enumerate(self._segments):
            runner = self._runners.get(k)
            if not (self.capture and seg["capture"]):
                lines.append(f"segment {k}: eager ({seg['why'] or 'capture off'})")
            elif runner is not None and runner.graph is not None:
                lines.append(f"segment {k}: captured ({seg['launches']} launches)")
                for t in (*runner.graph_outputs, *runner._static_inputs):
                    if isinstance(t, torch.Tensor):
                        self._static_storages.add(t.untyped_storage().data_ptr())
            else:
                why = runner.capture_error if runner is not None else self._direct.get(k, "not run")
                lines.append(f"segment {k}: uncaptured ({why})")
        log.info("SegmentedRunner: %s", "; ".join(lines))
        if self._report is not None:
            self._report[:] = lines

    def _clone_if_static(self, v: Any) -> Any:
        import torch

        if isinstance(v, torch.Tensor) and v.untyped_storage().data_ptr() in self._static_storages:
            return v.clone()
        return v
