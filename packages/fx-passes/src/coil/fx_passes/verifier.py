"""The invariant verifier: checks a graph after every pass (``COIL_VERIFY=1``, on in tests).

Invariants (ARCHITECTURE.md, seeds 1-4):

``meta-val``
    Every ``call_function`` node's ``meta["val"]`` equals a fresh FakeTensor propagation of the
    node from its inputs' values: shape, stride, storage offset (of a result that shares storage
    with an input), dtype, device, and aliasing (which inputs the result shares storage with).
    Checked node by node in graph order, this is equivalent to a whole-graph propagation from
    the placeholders.
``input-output-aliasing``
    No (graph input, graph output) pair shares storage after a pass unless it did before.
``no-mutation``
    In joint and post-grad graphs, the only mutation is a ``copy_`` epilogue into graph
    inputs: ``aten.copy_`` nodes writing a placeholder, followed by nothing but more such
    copies and the output. Only a pass declared ``introduces_mutation`` may break this.
``reinplace-last``
    A pass that introduces mutation is the last pass of its pipeline.

A violation raises :class:`~coil.fx_passes.errors.InvariantViolation` naming the pass, the node
and the invariant.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from coil.fx_passes.aliasing import input_output_alias_pairs
from coil.fx_passes.errors import InvariantViolation
from coil.fx_passes.fake_meta import (
    MissingMetaError,
    alias_signature,
    compute_val,
    describe_mismatch,
    fake_mode_of,
)
from coil.fx_passes.ops import is_mutating, overload_of
from torch.fx import GraphModule, Node
from torch.utils._pytree import tree_leaves

__all__ = [
    "AliasSnapshot",
    "Violation",
    "check_graph",
    "find_aliasing_violations",
    "find_meta_violations",
    "find_mutation_violations",
    "snapshot_aliasing",
]

_SKIP_EXCEPTIONS: tuple[type[BaseException], ...] = ()
try:  # data-dependent ops cannot be re-propagated without fresh unbacked symbols
    from torch._subclasses.fake_tensor import (
        DataDependentOutputException,
        DynamicOutputShapeException,
    )

    _SKIP_EXCEPTIONS = (DataDependentOutputException, DynamicOutputShapeException)
except ImportError:  # pragma: no cover - older torch
    pass


@dataclass(frozen=True)
class Violation:
    """One broken invariant: where (node name, ``""`` if graph-wide), which, and why."""

    node: str
    invariant: str
    detail: str


@dataclass(frozen=True)
class AliasSnapshot:
    """The (input index, output index) pairs that alias in a graph before a pass."""

    pairs: frozenset[tuple[int, int]]


def snapshot_aliasing(gm: GraphModule) -> AliasSnapshot:
    """Record which graph inputs and outputs alias, to compare after a pass."""
    return AliasSnapshot(frozenset(input_output_alias_pairs(gm)))


def find_meta_violations(gm: GraphModule) -> list[Violation]:
    """Nodes whose ``meta["val"]`` differs from a fresh fake propagation (``meta-val``).

    Graphs without FakeTensor metadata (e.g. Dynamo's torch-IR graphs, which carry
    ``example_value``) and nodes without ``meta["val"]`` are not checked.
    """
    fake_mode = fake_mode_of(gm)
    if fake_mode is None:
        return []
    out: list[Violation] = []
    for node in gm.graph.nodes:
        if node.op != "call_function" or "val" not in node.meta:
            continue
        try:
            fresh = compute_val(node, fake_mode)
        except MissingMetaError as e:
            out.append(Violation(node.name, "meta-val", f"cannot propagate: {e}"))
            continue
        except _SKIP_EXCEPTIONS:
            continue
        except Exception as e:
            out.append(
                Violation(node.name, "meta-val", f"propagation raised {type(e).__name__}: {e}")
            )
            continue
        stored = node.meta["val"]
        stored_alias, fresh_alias = alias_signature(node, stored), alias_signature(node, fresh)
        # a result in storage of its own: where it starts there is an allocation detail, and
        # torch's fake propagation of functionalized mutations of views (copy into a slice,
        # then slice_scatter) gives it the view's offset or 0 from one call to the next
        why = describe_mismatch(stored, fresh, offsets=bool(stored_alias or fresh_alias))
        if why is None and stored_alias != fresh_alias:
            why = f"aliasing with inputs {sorted(stored_alias)} != fresh {sorted(fresh_alias)}"
        if why is not None:
            out.append(Violation(node.name, "meta-val", f"{node.format_node()}: {why}"))
    return out


def find_aliasing_violations(before: AliasSnapshot, gm: GraphModule) -> list[Violation]:
    """Input/output pairs that alias now but did not before (``input-output-aliasing``)."""
    placeholders = list(gm.graph.find_nodes(op="placeholder"))
    out_node = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    outs = tree_leaves(out_node.args)
    new = sorted(input_output_alias_pairs(gm) - before.pairs)
    found = []
    for i, j in new:
        culprit = outs[j].name if isinstance(outs[j], Node) else ""
        found.append(
            Violation(
                culprit,
                "input-output-aliasing",
                f"output {j} now shares storage with input {i} ({placeholders[i].name})",
            )
        )
    return found


def _is_epilogue_copy(node: Node) -> bool:
    return (
        overload_of(node) is torch.ops.aten.copy_.default
        and isinstance(node.args[0], Node)
        and node.args[0].op == "placeholder"
    )


def find_mutation_violations(gm: GraphModule) -> list[Violation]:
    """Mutations other than a trailing ``copy_`` epilogue into graph inputs (``no-mutation``)."""
    nodes = list(gm.graph.nodes)
    out: list[Violation] = []
    for i, node in enumerate(nodes):
        if node.op == "output" or not is_mutating(node):
            continue
        if not _is_epilogue_copy(node):
            out.append(
                Violation(node.name, "no-mutation", f"{node.format_node()} mutates mid-graph")
            )
            continue
        later = [n for n in nodes[i + 1 :] if n.op != "output" and not _is_epilogue_copy(n)]
        if later:
            out.append(
                Violation(
                    node.name,
                    "no-mutation",
                    f"copy_ into input {node.args[0]} is followed by {later[0].name}; "
                    "copies into inputs must form the graph's epilogue",
                )
            )
    return out


def check_graph(
    gm: GraphModule,
    *,
    pass_name: str,
    previous_passes: Sequence[str] = (),
    before: AliasSnapshot | None = None,
    functional: bool = True,
) -> None:
    """Run every applicable check and raise on the first violation.

    Args:
        gm: the graph after ``pass_name``.
        pass_name: the pass being verified (named in the error).
        previous_passes: passes that ran earlier (named in the error).
        before: the aliasing snapshot taken before the pass; skipped when ``None``.
        functional: check ``no-mutation`` (joint and post-grad graphs).

    Raises:
        InvariantViolation: the first violation found.
    """
    try:
        gm.graph.lint()
    except Exception as e:
        raise InvariantViolation(pass_name, "", "graph-lint", str(e), previous_passes) from e
    found: list[Violation] = []
    if functional:
        found += find_mutation_violations(gm)
    found += find_meta_violations(gm)
    if before is not None:
        found += find_aliasing_violations(before, gm)
    if found:
        v = found[0]
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise InvariantViolation(pass_name, v.node, v.invariant, v.detail + more, previous_passes)
