"""What runs when coil cannot compile a graph (COIL_FALLBACK_ON_ERROR, on by default): the rule
is that it is never slower than eager.

A graph AOTAutograd hands coil's compilers is decomposed by coil's table (attention, layer norm,
GELU... as many small ATen ops) and may already be rewritten in place by coil's passes: run
eagerly it costs more than the code the user wrote. So a graph that fails while a backend call
compiles it falls back with its whole Dynamo graph:

- `whole_graph()` surrounds the backend's AOTAutograd call. Inside it a compile error of a
  forward, inference or backward graph (one warning, `GraphStats.eager_fallback` set) becomes
  `DynamoGraphFallback`, which propagates out of AOTAutograd (nothing is cached: torch's
  AOTAutograd cache stores a result only once the compilers returned, coil's frontend cache only
  after the call) to the backend, which returns the Dynamo graph's own `forward`
  (`dynamo_graph`): the torch code Dynamo captured, run as is, with eager's kernels and eager
  autograd. Dynamo's guards are its own, as for any backend.
- A training graph's backward is compiled there too: `whole_graph()` sets torch's
  `force_non_lazy_backward_lowering` (as the AOT cache does), so AOTAutograd compiles the
  backward together with the forward instead of at the first `backward()`, and a backward that
  fails is caught at the same point. Every graph of the call already compiled is then marked
  as running eagerly too (`dynamo_graph`): the count of graphs run eagerly stays true.

- When AOTAutograd itself fails (its tracing, coil's decompositions and partitioner inside
  it), before or between coil's compilers, the backend falls back the same way (`untraced`): a
  `GraphStats` named `dynamo_<n>` records the failure, one warning says it, and any graph of the
  call already compiled is marked as running eagerly too. Errors that Dynamo acts on itself
  propagate (`dynamo_handles`): a graph break at a fake-tensor limit, a restart of its analysis,
  a skipped frame, and IndexError, which Dynamo hands to the user as eager would raise it.

What runs is Dynamo's graph as it was captured (`Captured`, a record of its nodes taken before
coil's pre-grad passes, which edit the graph in place): a pass that rewrote it wrongly, or a
pre-grad pass that raised (a failure of stage 'pre-grad passes', handled as `untraced`), cannot
change what the fallback computes.

A graph compiled outside such a call falls back alone (`per_graph`): `compile_graph` called
directly runs the graph its caller gave; a backward that torch compiles lazily (a torch without
`force_non_lazy_backward_lowering`) runs the graph coil received, because its forward already
ran and saved the activations of coil's partition, which no other backward takes. That graph is
decomposed by coil's table and possibly rewritten by its passes: it runs as many small ATen ops,
slower than eager (docs/perf.md).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import itertools
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
import torch.fx
from coil.backend.errors import CoilCompileError
from coil.backend.stats import COMPILED, GraphStats
from coil.knobs import knobs

PER_GRAPH = "running this graph eagerly (set COIL_FALLBACK_ON_ERROR=0 to raise)"
WHOLE_GRAPH = ("running this graph eagerly: its Dynamo graph runs as captured, undecomposed "
               "(set COIL_FALLBACK_ON_ERROR=0 to raise)")


class DynamoGraphFallback(Exception):
    """Graph `graph` of the current backend call failed to compile (`error`): the backend runs
    the call's Dynamo graph eagerly. Raised only inside `whole_graph()`, caught by the backend."""

    def __init__(self, graph: str, error: Exception) -> None:
        super().__init__(f"{graph}: {error}")
        self.graph = graph
        self.error = error


@dataclasses.dataclass(frozen=True)
class _Scope:
    backward: bool  # the backward is compiled inside the call (torch's setting exists)


_SCOPE: contextvars.ContextVar[_Scope | None] = contextvars.ContextVar("coil_whole_graph_fallback", default=None)


@contextlib.contextmanager
def whole_graph() -> Iterator[None]:
    """Around one backend call's AOTAutograd call: with COIL_FALLBACK_ON_ERROR on, graphs that
    fail inside fall back with the whole Dynamo graph (`falls_back_whole`), and the backward is
    compiled with the forward. With the knob off, nothing changes (errors raise)."""
    if not knobs.fallback_on_error:
        yield
        return
    from torch._functorch import config as functorch_config

    backward = hasattr(functorch_config, "force_non_lazy_backward_lowering")
    settings: Any = (functorch_config.patch(force_non_lazy_backward_lowering=True) if backward
                     else contextlib.nullcontext())
    token = _SCOPE.set(_Scope(backward))
    try:
        with settings:
            yield
    finally:
        _SCOPE.reset(token)


def falls_back_whole(kind: str) -> bool:
    """Whether a failed graph of `kind` falls back with its whole Dynamo graph (raise
    `DynamoGraphFallback`) rather than alone (`per_graph`)."""
    scope = _SCOPE.get()
    return scope is not None and (kind != "backward" or scope.backward)


class Captured:
    """Dynamo's graph module as captured, before coil's passes edit its graph in place: each
    node's op, target, arguments and name as they were (a record a node, cheap: node objects and
    their argument tuples are kept, not copied; passes replace arguments, they do not mutate
    them). `module()` rebuilds that graph over the module's own parameters and submodules, only
    when a fallback needs it."""

    def __init__(self, gm: torch.fx.GraphModule) -> None:
        self.root = gm
        self.codegen = gm.graph._codegen  # the calling convention (pytree specs)
        self.records = [(n, n.op, n.target, n.args, n.kwargs, n.name, n.type) for n in gm.graph.nodes]
        self.nodes = len(self.records)

    def module(self) -> torch.fx.GraphModule:
        """A GraphModule running the captured graph."""
        graph = torch.fx.Graph()
        graph._codegen = self.codegen
        env: dict[torch.fx.Node, torch.fx.Node] = {}
        for node, op, target, args, kwargs, name, type_ in self.records:
            new = graph.create_node(op, target, torch.fx.map_arg(args, env.__getitem__),
                                    torch.fx.map_arg(kwargs, env.__getitem__), name, type_)
            new.meta = node.meta
            env[node] = new
        gm = torch.fx.GraphModule(self.root, graph)
        gm.meta = self.root.meta
        return gm


def dynamo_graph(captured: Captured, failure: DynamoGraphFallback, graphs: Sequence[GraphStats]
                 ) -> Callable[..., Any]:
    """What the backend returns after `failure`: the captured Dynamo graph's own forward. Each
    of the call's `graphs` compiled before the failure is marked as running eagerly with it (the
    failed one already says why)."""
    _run_with_dynamo_graph(graphs, failure.graph)
    return captured.module().forward  # type: ignore[no-any-return]


def _run_with_dynamo_graph(graphs: Sequence[GraphStats], failed: str) -> None:
    """Mark each of `graphs` not already marked as running eagerly because `failed` did."""
    for g in graphs:
        if g.eager_fallback is None:
            g.eager_fallback = f"runs eagerly with its Dynamo graph: {failed} failed to compile"


def dynamo_handles(error: BaseException) -> bool:
    """Whether Dynamo acts on `error` itself when a backend raises it (module docstring), so that
    the backend must let it propagate rather than fall back."""
    from torch._dynamo import exc

    names = ("TensorifyScalarRestartAnalysis", "ShortenTraceback", "SkipFrame")
    kinds = tuple(getattr(exc, n) for n in names if hasattr(exc, n))
    return isinstance(error, (IndexError, *kinds, *getattr(exc, "exceptions_allowed_to_be_fallback", ())))


_untraced = itertools.count()


def untraced(captured: Captured, stage: str, error: Exception, graphs: Sequence[GraphStats]
             ) -> tuple[Callable[..., Any], str]:
    """What the backend returns when `stage` failed with `error` outside coil's compilers: the
    captured Dynamo graph's own forward, and the failure's message. A `GraphStats` named
    `dynamo_<n>` carrying the message joins COMPILED, one warning says it, and each of `graphs`
    (the call's graphs compiled before the failure) is marked as running eagerly with it."""
    name = f"dynamo_{next(_untraced)}"
    message = str(CoilCompileError(stage, name, error))
    COMPILED.append(GraphStats(name, fx_nodes=captured.nodes, eager_fallback=message))
    _run_with_dynamo_graph(graphs, name)
    warnings.warn(f"{message} -- {WHOLE_GRAPH}", stacklevel=3)
    return captured.module().forward, message


def per_graph(gm: torch.fx.GraphModule) -> Callable[[list[Any]], Any]:
    """The boxed callable running `gm` itself eagerly, for a graph that falls back alone: as
    many ATen ops as coil's decompositions made of it, slower than eager (module docstring)."""
    def call(args: list[Any]) -> Any:
        a = list(args)
        args.clear()
        return gm(*a)

    call._boxed_call = True  # type: ignore[attr-defined]
    return call
