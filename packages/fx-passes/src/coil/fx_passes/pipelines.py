"""The default pipelines that ``coil.backend`` calls (docs/contracts.md, fx-passes -> backend)."""

from __future__ import annotations

from collections.abc import Sequence

from coil.fx_passes.fake_meta import repair_stale_aliasing
from coil.fx_passes.infra import GraphPass, Stage
from coil.fx_passes.manager import OnPass, PassManager
from coil.fx_passes.passes.accumulate_into import accumulate_into_addend
from coil.fx_passes.passes.addmm import fold_addmm, unfold_addmm
from coil.fx_passes.passes.associative_scan import expand_associative_scans
from coil.fx_passes.passes.attention import fuse_attention
from coil.fx_passes.passes.causal_mask import causal_masks
from coil.fx_passes.passes.channels_last import channels_last
from coil.fx_passes.passes.constant_fold import fold_constants
from coil.fx_passes.passes.conv_bias import unfold_conv_bias
from coil.fx_passes.passes.cse import common_subexpression_elimination
from coil.fx_passes.passes.dce import dead_code_elimination
from coil.fx_passes.passes.noop import remove_noops
from coil.fx_passes.passes.operand_copies import operand_copies_in_source_order
from coil.fx_passes.passes.pad_mm import pad_matmul_strides
from coil.fx_passes.passes.reinplace import reinplace as reinplace_pass
from coil.fx_passes.passes.scatter_fill import scatter_to_where
from coil.fx_passes.passes.sdpa_broadcast import widen_broadcast_kv
from coil.fx_passes.passes.topo_sort import stable_topological_sort
from coil.fx_passes.passes.view_pairs import simplify_view_pairs
from coil.knobs import knobs
from torch.fx import GraphModule

__all__ = [
    "post_grad_passes",
    "pre_grad_passes",
    "run_post_grad_passes",
    "run_pre_grad_passes",
]


def pre_grad_passes(*, attention: GraphPass | None = None) -> tuple[GraphPass, ...]:
    """The pre-grad pipeline: passes safe on Dynamo's torch IR (which may mutate and alias).

    ``attention`` (an :func:`~coil.fx_passes.passes.attention_op.attention_to_op` pass) runs
    first: it decides what becomes the attention op, and `causal_masks` then turns the causal
    masks of the SDPA calls it left into ``is_causal=True``; `widen_broadcast_kv` gives those
    calls keys and values as wide as their queries (CUDA's fused kernels need that)."""
    return (*([attention] if attention is not None else []), causal_masks, widen_broadcast_kv,
            dead_code_elimination)


def post_grad_passes(*, is_backward: bool, reinplace: bool | None = None) -> tuple[GraphPass, ...]:
    """The post-grad pipeline, in order; reinplacing (last) only when ``reinplace`` (default:
    ``knobs.reinplace`` / ``COIL_REINPLACE``)."""
    del is_backward  # the same pipeline serves forward and backward graphs today
    passes: list[GraphPass] = [
        expand_associative_scans,  # first: the scan's combine ops join the graph the others see
        fold_constants,  # first: turns GPT-2's `w / full([], sqrt(d))` into `w / sqrt(d)`
        scatter_to_where,  # nll_loss_backward's scatter into zeros becomes a fusable where
        accumulate_into_addend,  # a tied embedding's gradient: no [V, D] zeros, no add
        fuse_attention,  # before the view simplifications, which rewrite matmul's layout ops
        remove_noops,
        simplify_view_pairs,
        common_subexpression_elimination,
        operand_copies_in_source_order,  # before pad_matmul_strides, which reads the operands' layouts
        dead_code_elimination,
        fold_addmm,
        unfold_addmm,
        pad_matmul_strides,  # after the addmm rewrites, which decide the products' final form
        channels_last,  # convolution operands NHWC; after the rewrites that change products
        unfold_conv_bias,  # after channels_last: the add takes the convolution's final layout
        dead_code_elimination,
        stable_topological_sort,
    ]
    if knobs.reinplace if reinplace is None else reinplace:
        passes.append(reinplace_pass)
    return tuple(passes)


def run_pre_grad_passes(gm: GraphModule, example_inputs: Sequence[object], *,
                        attention: GraphPass | None = None) -> GraphModule:
    """Run the pre-grad pipeline on a Dynamo graph.

    Args:
        gm: the torch-IR graph Dynamo captured (may contain in-place ops and views).
        example_inputs: the inputs Dynamo passed with it (unused today; kept for passes that
            need shapes).
        attention: the pass rewriting attention into an attention op, run first
            (:func:`pre_grad_passes`); None: attention stays as written.

    Returns:
        An equivalent graph module (``gm``, edited in place). Only passes that respect
        mutation and aliasing run here: attention masks that are the causal mask become
        ``is_causal=True`` (:func:`~coil.fx_passes.passes.causal_mask.causal_masks`), keys
        and values broadcast over the query's heads are widened on CUDA
        (:func:`~coil.fx_passes.passes.sdpa_broadcast.widen_broadcast_kv`), then dead-code
        elimination of effect-free nodes.
    """
    del example_inputs
    return PassManager(pre_grad_passes(attention=attention), stage=Stage.PRE_GRAD).run(gm).graph_module


def run_post_grad_passes(
    gm: GraphModule, *, is_backward: bool, on_pass: OnPass | None = None
) -> GraphModule:
    """Run the post-grad pipeline on a forward or backward graph from AOTAutograd.

    Args:
        gm: functional ATen graph whose nodes carry ``meta["val"]`` FakeTensors.
        is_backward: whether ``gm`` is the backward graph.
        on_pass: optional hook ``on_pass(pass_name, graph_module, modified)`` called after each
            pass run (see :class:`~coil.fx_passes.manager.PassManager`); coil's backend uses it
            to dump the graph after every pass (COIL_DEBUG_DIR, COIL_LOGS=graph).

    Returns:
        An equivalent functional ATen graph (``gm``, edited in place) whose nodes' ``meta["val"]``
        are correct. Views whose metadata AOTAutograd's CSE left stale are re-derived first
        (:func:`~coil.fx_passes.fake_meta.repair_stale_aliasing`). The pipeline runs to a fixpoint; with ``COIL_REINPLACE=1`` it ends with
        reinplacing (the graph then mutates intermediates). With ``COIL_VERIFY=1`` every pass
        is verified (:mod:`coil.fx_passes.verifier`).
    """
    repair_stale_aliasing(gm)  # AOTAutograd's CSE can leave views with stale aliasing meta
    passes = post_grad_passes(is_backward=is_backward)
    manager = PassManager(passes, stage=Stage.POST_GRAD, fixpoint=True, on_pass=on_pass)
    return manager.run(gm).graph_module
