"""The public API snapshot: adding or removing a name must be deliberate (update README too)."""

from __future__ import annotations

import pathlib

import coil.fx_passes as fx

EXPECTED = [
    "ATTENTION_MODES", "ATTENTION_RULES", "Condition", "GRAPH_KIND", "GraphPass", "InvariantViolation", "Match", "PassError",
    "PassManager", "PassResult", "PatternRegistry", "Rule", "Stage", "accumulate_into_addend",
    "adopt_input_strides", "apply_rule", "attention_to_op", "causal_masks",
    "channels_last", "check_graph", "common_subexpression_elimination", "compute_val", "dead_code_elimination",
    "fake_mode_of", "fold_addmm", "fold_constants", "fuse_attention", "graph_pass", "knobs",
    "match_rule", "operand_copies_in_source_order", "pad_matmul_strides", "pad_matmul_strides_for", "pattern_pass", "post_grad_passes", "pre_grad_passes", "refresh_meta",
    "reinplace", "remove_noops", "run_post_grad_passes", "run_pre_grad_passes",
    "scatter_to_where", "simplify_view_pairs", "stable_topological_sort", "unfold_addmm",
    "unfold_conv_bias", "unfold_conv_bias_for", "widen_broadcast_kv",
]  # fmt: skip


def test_all_snapshot() -> None:
    assert sorted(fx.__all__) == sorted(EXPECTED)
    for name in fx.__all__:
        assert hasattr(fx, name)


def test_readme_documents_every_public_name() -> None:
    readme = (pathlib.Path(__file__).parents[1] / "README.md").read_text()
    missing = [n for n in fx.__all__ if f"`{n}" not in readme]
    assert not missing


def test_no_namespace_init() -> None:
    src = pathlib.Path(__file__).parents[1] / "src" / "coil"
    assert not (src / "__init__.py").exists()


def test_every_pass_documents_its_contract() -> None:
    passes = [getattr(fx, n) for n in fx.__all__ if isinstance(getattr(fx, n), fx.GraphPass)]
    assert len(passes) == 18
    for p in passes:
        doc = p.fn.__doc__ or ""
        for section in ("Stage:", "Args:", "Returns:", "Example::", "Soundness"):
            assert section in doc, (p.name, section)
