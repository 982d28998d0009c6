"""The ordering problem: a DAG of nodes that read and write buffers, and its liveness rules.

Liveness (the one rule every function of this package uses):

* every buffer has at most one writer; graph inputs have none and are live for the whole run;
* a buffer is allocated when its writer runs and freed after its last reader has run (a buffer
  nobody reads is live only while its writer runs); graph outputs stay live to the end;
* while a node runs, its reads and its writes are live together;
* a buffer whose size is known only at run time names the node after which it is known
  (``size_known_at``); its writer may not run before that node, so it is never allocated before
  its size exists.

:func:`peak_of_order` is the oracle: the largest number of live bytes over the steps of an order.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

__all__ = [
    "Buffer",
    "Graph",
    "GraphError",
    "Node",
    "live_bytes_per_step",
    "peak_of_order",
]


class GraphError(ValueError):
    """An ill-formed graph: the message names the node or buffer at fault."""


@dataclass(frozen=True)
class Buffer:
    """A buffer of the graph.

    Attributes:
        name: unique name.
        size: bytes (the size hint when the size is known only at run time); ``>= 0``.
        input: a graph input (no writer, live for the whole run).
        output: a graph output (live from its writer to the end).
        size_known_at: name of the node after which the size is known, or None when static.
    """

    name: str
    size: int
    input: bool = False
    output: bool = False
    size_known_at: str | None = None


@dataclass(frozen=True)
class Node:
    """One step of the program: reads some buffers, writes others (possibly none)."""

    name: str
    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Graph:
    """A validated dataflow graph. The node tuple's order is the *baseline* order.

    Construction raises :class:`GraphError` for: duplicate names, a negative size, an unknown
    buffer, a buffer with two writers, a written graph input, a non-input buffer nobody writes
    but someone reads, an unknown ``size_known_at`` node, or a cycle.

    Derived (read-only) fields, all by node index: ``writer`` (buffer -> node index),
    ``readers`` (buffer -> node indices), ``preds`` (node -> nodes that must run first).
    """

    buffers: tuple[Buffer, ...]
    nodes: tuple[Node, ...]
    writer: dict[str, int] = field(init=False, repr=False, compare=False)
    readers: dict[str, tuple[int, ...]] = field(init=False, repr=False, compare=False)
    preds: tuple[frozenset[int], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "buffers", tuple(self.buffers))
        object.__setattr__(self, "nodes", tuple(self.nodes))
        bufs: dict[str, Buffer] = {}
        for b in self.buffers:
            if b.name in bufs:
                raise GraphError(f"buffer {b.name!r} is declared twice")
            if b.size < 0:
                raise GraphError(f"buffer {b.name!r} has negative size {b.size}")
            bufs[b.name] = b
        index: dict[str, int] = {}
        writer: dict[str, int] = {}
        readers: dict[str, list[int]] = {name: [] for name in bufs}
        for i, n in enumerate(self.nodes):
            if n.name in index:
                raise GraphError(f"node {n.name!r} is declared twice")
            index[n.name] = i
            for name in (*n.reads, *n.writes):
                if name not in bufs:
                    raise GraphError(f"node {n.name!r} uses unknown buffer {name!r}")
            for name in n.writes:
                if bufs[name].input:
                    raise GraphError(f"node {n.name!r} writes graph input {name!r}")
                if name in writer:
                    other = self.nodes[writer[name]].name
                    raise GraphError(f"buffer {name!r} has two writers: {other!r} and {n.name!r}")
                writer[name] = i
            for name in dict.fromkeys(n.reads):
                readers[name].append(i)
        preds: list[set[int]] = [set() for _ in self.nodes]
        for i, n in enumerate(self.nodes):
            for name in n.reads:
                if name in writer:
                    if writer[name] == i:
                        raise GraphError(
                            f"cycle through node {n.name!r}: it reads {name!r}, which it writes"
                        )
                    preds[i].add(writer[name])
                elif not bufs[name].input:
                    raise GraphError(
                        f"node {n.name!r} reads {name!r}, which is no graph input and has no writer"
                    )
        for b in self.buffers:
            if b.size_known_at is None:
                continue
            if b.size_known_at not in index:
                raise GraphError(
                    f"buffer {b.name!r}: size_known_at names unknown node {b.size_known_at!r}"
                )
            if b.name in writer and index[b.size_known_at] != writer[b.name]:
                preds[writer[b.name]].add(index[b.size_known_at])
        object.__setattr__(self, "writer", writer)
        object.__setattr__(self, "readers", {k: tuple(v) for k, v in readers.items()})
        object.__setattr__(self, "preds", tuple(frozenset(p) for p in preds))
        cycle = _find_cycle(self.preds)
        if cycle is not None:
            names = " -> ".join(self.nodes[i].name for i in cycle)
            raise GraphError(f"cycle through node {self.nodes[cycle[0]].name!r}: {names}")

    def buffer(self, name: str) -> Buffer:
        """The buffer called ``name``."""
        for b in self.buffers:
            if b.name == name:
                return b
        raise KeyError(name)

    def node_index(self, names: Iterable[str]) -> list[int]:
        """Node indices for node names (``KeyError`` for unknown ones)."""
        index = {n.name: i for i, n in enumerate(self.nodes)}
        return [index[name] for name in names]

    def is_topological(self, order: Sequence[int]) -> bool:
        """True when ``order`` runs every node exactly once, each after its predecessors."""
        if sorted(order) != list(range(len(self.nodes))):
            return False
        seen: set[int] = set()
        for i in order:
            if not self.preds[i] <= seen:
                return False
            seen.add(i)
        return True


def _find_cycle(preds: Sequence[frozenset[int]]) -> list[int] | None:
    """A cycle (as node indices, following predecessor edges reversed) or None."""
    state = [0] * len(preds)  # 0 new, 1 on stack, 2 done
    for root in range(len(preds)):
        if state[root]:
            continue
        stack: list[tuple[int, list[int]]] = [(root, sorted(preds[root]))]
        path = [root]
        state[root] = 1
        while stack:
            v, todo = stack[-1]
            if not todo:
                stack.pop()
                path.pop()
                state[v] = 2
                continue
            u = todo.pop()
            if state[u] == 1:
                cyc = path[path.index(u) :]
                return [*reversed(cyc)]
            if state[u] == 0:
                state[u] = 1
                path.append(u)
                stack.append((u, sorted(preds[u])))
    return None


def live_bytes_per_step(graph: Graph, order: Sequence[int]) -> list[int]:
    """Live bytes while each node of ``order`` runs (one entry per step).

    Raises ``ValueError`` when ``order`` is not a topological order of ``graph``.
    """
    if not graph.is_topological(order):
        raise ValueError("order is not a topological order of the graph")
    n = len(order)
    pos = {v: k for k, v in enumerate(order)}
    delta = [0] * (n + 1)
    base = 0
    for b in graph.buffers:
        if b.input:
            base += b.size
            continue
        if b.name not in graph.writer:
            continue  # declared but never used
        start = pos[graph.writer[b.name]]
        end = n - 1 if b.output else max([start, *(pos[r] for r in graph.readers[b.name])])
        delta[start] += b.size
        delta[end + 1] -= b.size
    out = []
    acc = base
    for k in range(n):
        acc += delta[k]
        out.append(acc)
    return out


def peak_of_order(graph: Graph, order: Sequence[int]) -> int:
    """The peak of live bytes of running ``graph`` in ``order`` (node indices).

    The inputs alone count when there are no nodes. Raises ``ValueError`` when ``order`` is not
    a topological order.
    """
    base = sum(b.size for b in graph.buffers if b.input)
    return max([base, *live_bytes_per_step(graph, order)])
