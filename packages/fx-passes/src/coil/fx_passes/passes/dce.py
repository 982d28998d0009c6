"""Dead-code elimination."""

from __future__ import annotations

from coil.fx_passes.conditions import NO_DEAD_CODE
from coil.fx_passes.infra import PassResult, graph_pass
from coil.fx_passes.ops import is_impure
from torch.fx import GraphModule

__all__ = ["dead_code_elimination"]


@graph_pass("dead_code_elimination", ensures=(NO_DEAD_CODE,))
def dead_code_elimination(gm: GraphModule) -> PassResult:
    """Remove nodes whose results are unused and that have no effect.

    Stage: any (pre-grad, joint, post-grad).

    Args:
        gm: the graph module, edited in place.

    Returns:
        ``PassResult(gm, modified)``; modified when a node was removed.

    Example::

        before: a = aten.mul(x, 2); b = aten.add(x, 1); return b
        after:  b = aten.add(x, 1); return b

    Soundness: only ``call_function``/``call_method``/``get_attr`` nodes that are not impure
    (:func:`coil.fx_passes.ops.is_impure`) are removed: placeholders, outputs, mutating ops
    (``copy_``, ``add_``, ``inplace=True``), random ops (a removed ``rand`` would shift the
    generator state seen by later ones), modules and higher-order ops always stay. Removal runs
    in reverse order, so chains of dead nodes disappear in one pass.
    """
    modified = False
    for node in reversed(list(gm.graph.nodes)):
        if node.users or node.op not in ("call_function", "call_method", "get_attr"):
            continue
        if is_impure(node):
            continue
        gm.graph.erase_node(node)
        modified = True
    return PassResult(gm, modified)
