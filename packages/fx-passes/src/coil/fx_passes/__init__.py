"""coil.fx_passes: verified torch.fx graph passes.

The backend's entry points are :func:`run_pre_grad_passes` and :func:`run_post_grad_passes`
(docs/contracts.md). The rest is the toolkit they are built from: the pass infrastructure
(:class:`GraphPass`, :class:`PassResult`, :class:`PassManager`), the invariant verifier, the
FakeTensor metadata updater, the pattern matcher and the passes themselves.
"""

from coil.fx_passes.errors import InvariantViolation, PassError
from coil.fx_passes.fake_meta import compute_val, fake_mode_of, refresh_meta
from coil.fx_passes.infra import GRAPH_KIND, Condition, GraphPass, PassResult, Stage, graph_pass
from coil.fx_passes.manager import PassManager
from coil.fx_passes.passes.accumulate_into import accumulate_into_addend
from coil.fx_passes.passes.addmm import fold_addmm, unfold_addmm
from coil.fx_passes.passes.attention import ATTENTION_RULES, fuse_attention
from coil.fx_passes.passes.attention_op import ATTENTION_MODES, attention_to_op
from coil.fx_passes.passes.causal_mask import causal_masks
from coil.fx_passes.passes.channels_last import adopt_input_strides, channels_last
from coil.fx_passes.passes.constant_fold import fold_constants
from coil.fx_passes.passes.conv_bias import unfold_conv_bias, unfold_conv_bias_for
from coil.fx_passes.passes.cse import common_subexpression_elimination
from coil.fx_passes.passes.dce import dead_code_elimination
from coil.fx_passes.passes.noop import remove_noops
from coil.fx_passes.passes.operand_copies import operand_copies_in_source_order
from coil.fx_passes.passes.pad_mm import pad_matmul_strides, pad_matmul_strides_for
from coil.fx_passes.passes.reinplace import reinplace
from coil.fx_passes.passes.scatter_fill import scatter_to_where
from coil.fx_passes.passes.sdpa_broadcast import widen_broadcast_kv
from coil.fx_passes.passes.topo_sort import stable_topological_sort
from coil.fx_passes.passes.view_pairs import simplify_view_pairs
from coil.fx_passes.patterns.matcher import apply_rule, match_rule, pattern_pass
from coil.fx_passes.patterns.registry import PatternRegistry
from coil.fx_passes.patterns.rule import Match, Rule
from coil.fx_passes.pipelines import (
    post_grad_passes,
    pre_grad_passes,
    run_post_grad_passes,
    run_pre_grad_passes,
)
from coil.fx_passes.verifier import check_graph
from coil.knobs import knobs  # coil's registry, re-exported

__all__ = [
    "ATTENTION_MODES",
    "ATTENTION_RULES",
    "GRAPH_KIND",
    "Condition",
    "GraphPass",
    "InvariantViolation",
    "Match",
    "PassError",
    "PassManager",
    "PassResult",
    "PatternRegistry",
    "Rule",
    "Stage",
    "accumulate_into_addend",
    "adopt_input_strides",
    "apply_rule",
    "attention_to_op",
    "causal_masks",
    "channels_last",
    "check_graph",
    "common_subexpression_elimination",
    "compute_val",
    "dead_code_elimination",
    "fake_mode_of",
    "fold_addmm",
    "fold_constants",
    "fuse_attention",
    "graph_pass",
    "knobs",
    "match_rule",
    "operand_copies_in_source_order",
    "pad_matmul_strides",
    "pad_matmul_strides_for",
    "pattern_pass",
    "post_grad_passes",
    "pre_grad_passes",
    "refresh_meta",
    "reinplace",
    "remove_noops",
    "run_post_grad_passes",
    "run_pre_grad_passes",
    "scatter_to_where",
    "simplify_view_pairs",
    "stable_topological_sort",
    "unfold_addmm",
    "unfold_conv_bias",
    "unfold_conv_bias_for",
    "widen_broadcast_kv",
]
