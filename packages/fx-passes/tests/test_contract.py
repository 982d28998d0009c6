"""The fx-passes -> coil.backend contract (docs/contracts.md) on real AOTAutograd graphs."""

from __future__ import annotations

import inspect

import pytest
import torch
import torch.fx.experimental.proxy_tensor
from coil.fx_passes import post_grad_passes, run_post_grad_passes, run_pre_grad_passes


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 32)
        self.fc2 = torch.nn.Linear(32, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.fc1(x)) * 1.0
        dead = h.exp()  # noqa: F841 - dead code for the pipeline to remove
        return self.fc2(h + h.sin() + h.sin())


def test_signatures_match_contract() -> None:
    pre = inspect.signature(run_pre_grad_passes)
    post = inspect.signature(run_post_grad_passes)
    assert list(pre.parameters) == ["gm", "example_inputs", "attention"]
    assert pre.parameters["attention"].kind is inspect.Parameter.KEYWORD_ONLY
    assert pre.parameters["attention"].default is None
    assert list(post.parameters) == ["gm", "is_backward", "on_pass"]
    assert post.parameters["is_backward"].kind is inspect.Parameter.KEYWORD_ONLY
    assert post.parameters["on_pass"].kind is inspect.Parameter.KEYWORD_ONLY
    assert post.parameters["on_pass"].default is None


def test_on_pass_reports_every_pass_run(aot) -> None:
    """`on_pass(name, gm, modified)` sees every pass of every fixpoint round, in order, with the
    graph as that pass left it; passes that changed nothing report False."""
    torch.manual_seed(0)
    reports: list[tuple[str, bool, str]] = []

    def on_pass(name: str, gm: torch.fx.GraphModule, modified: bool) -> None:
        reports.append((name, modified, gm.code))

    x = torch.randn(4, 16, requires_grad=True)
    cap = aot(MLP(), [x], lambda g, bw: run_post_grad_passes(g, is_backward=bw, on_pass=on_pass) if not bw else g)
    names = [n for n, _, _ in reports]
    pipeline = [p.name for p in post_grad_passes(is_backward=False)]
    assert len(names) % len(pipeline) == 0 and len(names) >= 2 * len(pipeline)  # >= 2 rounds: one changes, one confirms
    assert names[: len(pipeline)] == pipeline
    cse = next(i for i, (n, m, _) in enumerate(reports) if n == "common_subexpression_elimination" and m)
    assert reports[cse][2].count("aten.sin") == 1  # the graph after the pass, not before
    assert not any(m for _, m, _ in reports[-len(pipeline):])  # the last round changed nothing
    assert cap.after[0].code == reports[-1][2]


def test_pass_manager_on_pass_runs_before_verification() -> None:
    """The hook sees a pass's graph even when that pass then fails verification."""
    from coil.fx_passes import GraphPass, InvariantViolation, PassManager, PassResult, Stage

    def break_meta(gm: torch.fx.GraphModule) -> PassResult:
        node = next(n for n in gm.graph.nodes if n.op == "call_function")
        node.meta["val"] = node.meta["val"].new_empty((99,))
        return PassResult(gm, True)

    seen: list[str] = []
    gm = torch.fx.experimental.proxy_tensor.make_fx(lambda a: a.sin() + 1, tracing_mode="fake")(torch.randn(4))
    manager = PassManager([GraphPass("break_meta", break_meta, frozenset(Stage))], stage=Stage.POST_GRAD,
                          verify=True, on_pass=lambda name, g, m: seen.append(name))
    with pytest.raises(InvariantViolation):
        manager.run(gm)
    assert seen == ["break_meta"]


def test_post_grad_pipeline_on_training_graphs(aot, op_names) -> None:
    torch.manual_seed(0)
    model = MLP()
    x = torch.randn(4, 16, requires_grad=True)
    cap = aot(model, [x], lambda g, bw: run_post_grad_passes(g, is_backward=bw))
    out = cap.fn(x)
    out.sum().backward()
    grads = [p.grad.clone() for p in model.parameters()] + [x.grad.clone()]
    model.zero_grad()
    x.grad = None
    ref = model(x)
    ref.sum().backward()
    torch.testing.assert_close(out, ref)
    for g, p in zip(grads, [*list(model.parameters()), x], strict=True):
        torch.testing.assert_close(g, p.grad)
    fw_before, fw_after = op_names(cap.before[0]), op_names(cap.after[0])
    assert fw_before.count("aten.sin.default") == 2
    assert fw_after.count("aten.sin.default") == 1  # CSE
    assert "aten.exp.default" not in fw_after  # DCE
    # h * 1.0 stays: relu's result and the product are both saved for backward (graph outputs),
    # so forwarding one to the other would make two outputs share storage.
    assert fw_after.count("aten.mul.Tensor") == 1
    assert len(cap.after) == 2  # the backward graph went through the pipeline too
    for g in cap.after:
        for n in g.graph.nodes:
            if n.op == "call_function":
                assert "val" in n.meta


def test_pre_grad_pipeline_keeps_mutation_and_removes_dead_code() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        y.add_(1)  # in place, result unused: must stay
        _ = torch.cos(x)  # pure and unused: goes
        return y

    gm = torch.fx.symbolic_trace(f)
    x = torch.randn(3)
    out = run_pre_grad_passes(gm, [x])
    targets = [str(n.target) for n in out.graph.nodes]
    assert "add_" in targets
    assert not any("cos" in t for t in targets)
    torch.testing.assert_close(out(x), f(x))


@pytest.mark.parametrize("method", [False, True], ids=["operator", "dunder"])
def test_pre_grad_pipeline_keeps_python_inplace_operators(method: bool) -> None:
    """Python's in-place operators (`s += 1`: Dynamo's `operator.iadd`, or `s.__iadd__(1)`) write
    into a tensor operand: unused, they still stay (an optimizer's step count is such a node);
    on an operand recorded as a number (a SymInt's `+=`) they write nothing and go."""
    import operator

    from coil.fx_passes.ops import is_mutating

    g = torch.fx.Graph()
    s, x, n = g.placeholder("s"), g.placeholder("x"), g.placeholder("n")
    n.meta["example_value"] = 3
    for operand in (s, n):
        if method:
            g.call_method("__iadd__", (operand, 1))
        else:
            g.call_function(operator.iadd, (operand, 1))
    g.output(g.call_function(torch.mul, (x, 2)))
    kept = [is_mutating(node) for node in g.nodes if node.op.startswith("call") and node.args[0] is not x]
    assert kept == [True, False]

    out = run_pre_grad_passes(torch.fx.GraphModule(torch.nn.Module(), g), [])
    calls = [(node.target, node.args[0].name) for node in out.graph.nodes if node.op.startswith("call")]
    assert calls == [("__iadd__" if method else operator.iadd, "s"), (torch.mul, "x")]
    state = torch.zeros(())
    out(state, torch.ones(2), 3)
    assert state.item() == 1.0


def test_pre_grad_pipeline_keeps_dynamo_inplace_operator() -> None:
    """End to end through Dynamo: `s += 1` on a tensor whose new value the graph does not use
    (RMSprop's step count) still happens."""

    def backend(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> object:
        return run_pre_grad_passes(gm, example_inputs).forward

    def f(s: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        s += 1
        return x * 2

    state = torch.zeros(())
    compiled = torch.compile(f, backend=backend)
    compiled(state, torch.ones(2))
    compiled(state, torch.ones(2))
    assert state.item() == 2.0
