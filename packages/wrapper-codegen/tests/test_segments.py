"""CUDA-graph segments of a wrapper program (segments.split_segments + emit_python(segments=)).

The segmented program is run here by a minimal driver written for the test (values by name,
segments in order) on the CPU, and compared with eager PyTorch and with the unsegmented wrapper.
`repeat_interleave(..., output_size=)` is the uncapturable step (data-dependent output shape op,
coil.scheduler.capture); it is an ATen fallback with static shapes, so everything else lowers.
"""

from __future__ import annotations

import itertools
from typing import Any

import torch
from coil.wrapper_codegen import ExternCall, KernelCall, Return, build, emit_python
from coil.wrapper_codegen.segments import split_segments


def _two_blockers(x: torch.Tensor, r: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
    y = torch.relu(x) + 1
    reps = (y.sum(1) * 0).long() + r  # == r, but made from y: the blocker runs after y's kernel
    i1 = torch.repeat_interleave(reps, output_size=6)
    a = y.sum(0) + i1.sum().float()  # y: made before the first blocker, read after it
    i2 = torch.repeat_interleave(reps * 2, output_size=12)
    b = (a * w).sum(1) + i2.float().mean()
    x.copy_(x * 2)  # a copy_ epilogue into a graph input, after the blockers
    return a, b, y


def _load(wr: Any, fn: Any, *inputs: torch.Tensor) -> tuple[Any, Any, Any]:
    s = wr.schedule(fn, *inputs)
    launches = wr.launches_for(s)
    prog = build(s, launches)
    seg = split_segments(prog)
    src = emit_python(prog.lines, list(launches), sorted(prog.constants), "g", segments=seg)
    bufs = s.graph.buffers()
    kernels = {k.name: wr.FakeKernel(k, launches[k.name], bufs) for k in s.kernels()}
    ns: dict[str, Any] = {}
    exec(compile(src, "<wrapper>", "exec"), ns)
    return ns["make"](torch.device("cpu"), prog.constants, kernels), prog, seg


def _drive(plan: dict[str, Any], args: list[Any]) -> tuple[Any, ...]:
    """Run a segment plan: every segment input must be bound by then (graph input or output of
    an earlier segment)."""
    env = {n: a for n, a in zip(plan["inputs"], args, strict=True) if n is not None}
    args.clear()
    for seg in plan["segments"]:
        missing = [n for n in seg["inputs"] if n not in env]
        assert not missing, f"segment reads {missing} before anything binds them"
        vals = [env[n] for n in seg["inputs"]]
        outs = seg["fn"](vals)
        assert vals == [], "a segment takes its boxed inputs over"
        assert len(outs) == len(seg["outputs"])
        env.update(zip(seg["outputs"], outs, strict=True))
    return tuple(env[v] if kind == "ref" else v for kind, v in plan["returns"])


def test_split_isolates_the_blockers(wr: Any) -> None:
    x, r, w = torch.randn(3, 4), torch.tensor([1, 2, 3]), torch.randn(3, 4)
    _, prog, seg = _load(wr, _two_blockers, x, r, w)
    assert seg is not None and len(prog.blockers) == 2
    blocked = [prog.lines[i] for i in sorted(prog.blockers)]
    assert all(isinstance(b, ExternCall) and "repeat_interleave" in b.op for b in blocked)
    calls = [ln for ln in prog.lines if isinstance(ln, KernelCall | ExternCall)]
    # the calls, in order, are exactly the segments' calls; eager segments hold only blocked calls
    seg_calls = [ln for s in seg.segments for ln in s.lines if isinstance(ln, KernelCall | ExternCall)]
    assert seg_calls == calls
    for s in seg.segments:
        own = [ln for ln in s.lines if isinstance(ln, KernelCall | ExternCall)]
        assert s.launches == len(own)
        if s.capture:
            assert not any(ln in blocked for ln in own) and s.why is None
        else:
            assert own and all(ln in blocked for ln in own) and "data-dependent output shape" in (s.why or "")
    kinds = [s.capture for s in seg.segments]
    assert all(a != b for a, b in itertools.pairwise(kinds)), "adjacent segments alternate"
    assert isinstance(prog.lines[-1], Return) and seg.returns == prog.lines[-1].values


def test_segmented_program_matches_eager_and_the_whole_wrapper(wr: Any) -> None:
    x, r, w = torch.randn(3, 4), torch.tensor([1, 2, 3]), torch.randn(3, 4)
    call, _prog, seg = _load(wr, _two_blockers, x, r, w)
    x_eager, x_whole, x_seg = x.clone(), x.clone(), x.clone()
    want = _two_blockers(x_eager, r, w)
    whole = call([x_whole, r, w])
    got = _drive(call.segments, [x_seg, r, w])
    for g, h, e in zip(got, whole, want, strict=True):
        torch.testing.assert_close(g, e)
        torch.testing.assert_close(g, h)
    torch.testing.assert_close(x_seg, x_eager)  # the input mutation happened once, in place
    # a value made before the first blocker and read after it is an output of the first segment
    y_users = [k for k, s in enumerate(seg.segments) if any(n in s.inputs for n in seg.segments[0].outputs)]
    assert max(y_users) >= 2


def test_no_blocker_means_no_segments(wr: Any) -> None:
    def f(x: torch.Tensor) -> tuple[torch.Tensor]:
        return (torch.cummax(torch.relu(x), 0)[0] * 2,)  # a fallback, but capturable

    s = wr.schedule(f, torch.randn(3, 4))
    prog = build(s, wr.launches_for(s))
    assert prog.fallback_ops and prog.blockers == {}
    assert split_segments(prog) is None
    src = emit_python(prog.lines, list(wr.launches_for(s)), sorted(prog.constants), "g")
    assert "segments" not in src


def test_dynamic_shapes_are_not_split(wr: Any) -> None:
    import coil.lowering_ir as L
    from coil.scheduler import schedule
    from torch.fx.experimental.proxy_tensor import make_fx

    def f(x: torch.Tensor, r: torch.Tensor) -> tuple[torch.Tensor]:
        y = torch.relu(x) + 1
        i = torch.repeat_interleave(r, output_size=2 * x.shape[0])
        return (y.sum(1) + i.sum(),)

    x, r = torch.randn(3, 4), torch.tensor([1, 2, 3])
    gm = make_fx(f, decomposition_table=L.decomposition_table(), tracing_mode="symbolic")(x, r)
    g = L.lower(gm)
    assert g.symbol_hints, "traced with symbolic sizes"
    sched = schedule(g)
    prog = build(sched, wr.launches_for(sched))
    assert prog.blockers, "the repeat_interleave is still a blocker"
    assert split_segments(prog) is None
