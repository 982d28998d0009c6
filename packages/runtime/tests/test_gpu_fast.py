"""GPU tests of the fast launch path and the CUDA-graph runner (run on a GPU: `pytest -m gpu`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from coil.knobs import knobs
from coil.runtime import CaptureSpec, CudaGraphRunner, ReplayPolicy, compile_kernels, cudagraphify
from coil.runtime.handouts import can_swap

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (none found)"),
]


def _counting(kernel: Any) -> list[int]:
    """Count the launches that go through JITFunction.run."""
    calls: list[int] = []
    run = kernel._run

    def counted(*args: object, **kwargs: object) -> object:
        calls.append(1)
        return run(*args, **kwargs)

    kernel._run = counted
    return calls


def test_fast_path_results_and_fallbacks(cache_dir: Path, specs: Any) -> None:
    kernel = compile_kernels([specs.add(128)], torch.device("cuda"))["add_kernel"]
    slow_calls = _counting(kernel)
    base = torch.randn(4096 + 64, device="cuda")
    y = torch.randn(4096 + 64, device="cuda")
    cases = [  # (x, y, n): the key changes with alignment, n == 1, n % 16
        (base[:4096], y[:4096], 4096),
        (base[:4096], y[:4096], 4096),
        (base[1:4097], y[:4096], 4096),
        (base[1:4097], y[:4096], 4096),
        (base[:4096], y[:4096], 1),
        (base[:4096], y[:4096], 4001),
        (base[:4096], y[:4096], 4001),
        (base[:4096], y[:4096], 4096),
    ]
    for x_, y_, n in cases:
        out = torch.zeros(4096, device="cuda")
        kernel(((n + 127) // 128,), x_, y_, out, n)
        assert torch.equal(out[:n], x_[:n] + y_[:n]) and not out[n:].any()
    assert kernel.fast
    assert len(slow_calls) == 4  # first launch, unaligned, n == 1, n = 4001
    assert len(kernel.bound_keys) == 4


def test_fast_path_2d_grid_and_knob_off_agree(cache_dir: Path, specs: Any) -> None:
    x = torch.randn(64, 1000, device="cuda")
    out_fast, out_slow = torch.empty(64, device="cuda"), torch.empty(64, device="cuda")
    kernel = compile_kernels([specs.rowsum_dynamic()], torch.device("cuda"))["rowsum_dynamic"]
    for _ in range(3):
        kernel((64, 1), x, out_fast, 1000)
    with knobs.override(fast_launch=False):
        from coil.runtime.compile import clear_memo

        clear_memo()
        slow = compile_kernels([specs.rowsum_dynamic()], torch.device("cuda"))["rowsum_dynamic"]
    slow((64,), x, out_slow, 1000)
    assert kernel.fast and not slow.fast
    assert torch.equal(out_fast, out_slow)


def test_fast_path_on_a_side_stream(cache_dir: Path, specs: Any) -> None:
    kernel = compile_kernels([specs.add(256)], torch.device("cuda"))["add_kernel"]
    x = torch.randn(1 << 20, device="cuda")
    kernel((4096,), x, x, torch.empty_like(x), 1 << 20)
    stream = torch.cuda.Stream()
    out = torch.empty_like(x)
    with torch.cuda.stream(stream):
        torch.cuda._sleep(10_000_000)  # the launch must queue behind this, on this stream
        kernel((4096,), x, x, out, 1 << 20)
    stream.synchronize()
    assert torch.equal(out, 2 * x)


def _chain_ref(a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The chain's result in the kernel's own order of fp32 additions (a + w + w + w + w): equal
    bit for bit. (`a + 4 * w` rounds differently, and elements where the sum nearly cancels then
    fail any relative tolerance, with the fast launch path on or off.)"""
    out = a
    for _ in range(4):
        out = out + w.detach()
    return out


def _chain(kernel: Any, n: int = 1024) -> Any:
    def call(args: list[Any]) -> tuple[Any, ...]:
        a, w = args
        args.clear()
        buf = a
        for _ in range(4):
            nxt = torch.empty_like(buf)
            kernel(((n + 127) // 128,), buf, w, nxt, n)
            buf = nxt
        return (buf, buf.sum())

    return call


def test_cuda_graph_runner_replays_with_new_inputs(cache_dir: Path, specs: Any) -> None:
    kernel = compile_kernels([specs.add(128)], torch.device("cuda"))["add_kernel"]
    w = torch.nn.Parameter(torch.randn(1024, device="cuda"), requires_grad=False)
    a0 = torch.randn(1024, device="cuda")
    runner = CudaGraphRunner(_chain(kernel), [a0, w])  # w: static (a Parameter)
    assert runner.static_indices == (1,) and runner.first_outputs is not None
    assert torch.equal(runner.first_outputs[0], _chain_ref(a0, w))
    results = []
    for _ in range(3):
        a = torch.randn(1024, device="cuda")
        args = [a, w]
        out, total = runner(args)
        assert args == []  # boxed: the list is cleared
        results.append(out)
        assert torch.equal(out, _chain_ref(a, w))
        assert torch.allclose(total, out.sum(), rtol=0, atol=1e-3)
    assert results[0].data_ptr() != results[1].data_ptr()  # clones: not overwritten
    w2 = torch.nn.Parameter(torch.randn(1024, device="cuda"), requires_grad=False)
    a = torch.randn(1024, device="cuda")
    with pytest.raises(ValueError, match="captured for"):
        runner([torch.randn(512, device="cuda"), w])
    out, _ = runner([a, w2])  # the static input moved: no more replays, plain calls
    assert runner.capture_error is not None and runner.graph is None
    assert torch.equal(out, _chain_ref(a, w2))
    a = torch.randn(1024, device="cuda")
    out, _ = runner([a, w2])
    assert torch.equal(out, _chain_ref(a, w2))


def test_cuda_graph_runner_mutated_inputs_and_extern_ops(cache_dir: Path) -> None:
    def call(args: list[Any]) -> tuple[Any, ...]:
        x, counter, m = args
        counter.add_(1)  # an input mutation (ATen in place: _version moves)
        return (x @ m, counter * 2)

    x, m = torch.randn(64, 64, device="cuda"), torch.randn(64, 64, device="cuda")
    counter = torch.zeros(4, device="cuda")
    run = cudagraphify(call, CaptureSpec(static_input_indices=(2,)))
    first = run([x, counter, m])
    assert torch.equal(counter, torch.ones(4, device="cuda"))  # mutated once by the warm-up
    assert torch.allclose(first[0], x @ m)
    for step in range(2, 5):
        x = torch.randn(64, 64, device="cuda")
        out, twice = run([x, counter, m])
        assert torch.equal(counter, torch.full((4,), float(step), device="cuda"))
        assert torch.equal(twice, 2 * counter)
        assert torch.allclose(out, x @ m, rtol=1e-3, atol=1e-3)


def test_a_captured_matmul_keeps_no_workspace_in_the_ordinary_pool(cache_dir: Path) -> None:
    """cuBLAS's workspace of a capture is memory of the graph's pool: the ordinary pool holds no
    workspace after the capture, and tensors the caller then allocates there (over any memory a
    cached workspace could have had) are untouched by replays."""
    def call(args: list[Any]) -> tuple[Any, ...]:
        a, b = args
        return ((a @ b).relu(),)

    a, b = torch.randn(512, 1024, device="cuda"), torch.randn(1024, 768, device="cuda")
    torch.cuda.synchronize()
    torch._C._cuda_clearCublasWorkspaces()
    torch.cuda.empty_cache()
    before = torch.cuda.memory_allocated()
    run = cudagraphify(call, CaptureSpec(static_input_indices=(1,)))
    run([a, b])
    torch.cuda.synchronize()
    held = a.nbytes + 512 * 768 * 4  # the pool's static input buffer and static output
    assert torch.cuda.memory_allocated() - before <= held + (1 << 20), "a cuBLAS workspace was kept"
    torch.cuda.empty_cache()
    fills = [torch.full((8 << 20,), float(i), device="cuda") for i in range(8)]  # 256 MiB, the ordinary pool
    for _ in range(3):
        a = torch.randn(512, 1024, device="cuda")
        (out,) = run([a, b])
        torch.testing.assert_close(out, (a @ b).relu(), rtol=1e-3, atol=1e-3)
    torch.cuda.synchronize()
    for i, f in enumerate(fills):
        assert bool((f == float(i)).all()), "a replay wrote over memory of the ordinary pool"


def test_cuda_graph_runner_without_clones_aliases_static_outputs(cache_dir: Path) -> None:
    runner = CudaGraphRunner(lambda args: (args[0] * 2,), [torch.ones(8, device="cuda")],
                             policy=ReplayPolicy(clone_outputs=False))
    first = runner([torch.ones(8, device="cuda")])[0]
    second = runner([torch.full((8,), 3.0, device="cuda")])[0]
    assert first is second and torch.equal(first, torch.full((8,), 6.0, device="cuda"))


def test_cuda_graph_runner_takes_conjugate_view_outputs(cache_dir: Path) -> None:
    # torch.fft.ifft of a real input returns a conjugate view; the runner's warm-up records its
    # outputs on the caller's stream, which failed for such a view ("Expected Tensor but got None")
    def call(args: list[Any]) -> tuple[Any, ...]:
        z = torch.complex(args[0], -args[0])
        return (z.conj(), torch.fft.ifft(args[0]))

    x0 = torch.randn(4, 6, device="cuda")
    runner = CudaGraphRunner(call, [x0])
    for x in (x0, torch.randn(4, 6, device="cuda")):
        got, want = runner([x]), call([x])
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g.resolve_conj(), w.resolve_conj())


def _broadcasting(args: list[Any]) -> tuple[Any, ...]:
    """Takes a broadcast input (stride 0) and returns broadcast views of its own results, as the
    subgraphs DDP's graph splitting makes pass masks and positions from one to the next."""
    x, row = args
    y = x * row
    return (y.sum(1, keepdim=True).expand(-1, 8), y, (y[:, :1] + 1).expand(-1, 8).t())


@pytest.mark.parametrize("policy", ["held", "handed_out"])
def test_broadcast_inputs_and_outputs_replay(cache_dir: Path, policy: str) -> None:
    """A broadcast input is copied into its static buffer, and a broadcast output takes the first
    call's result, element by distinct element (a plain copy into such a view raises)."""
    rp = ReplayPolicy() if policy == "held" else ReplayPolicy(hold_outputs=False)
    runner = CudaGraphRunner(_broadcasting, [torch.randn(16, 8, device="cuda"),
                                             torch.randn(1, 8, device="cuda").expand(16, 8)], policy=rp)
    kept = []
    for step in range(4):
        g = torch.Generator(device="cuda").manual_seed(step)
        x = torch.randn(16, 8, device="cuda", generator=g)
        row = torch.randn(1, 8, device="cuda", generator=g).expand(16, 8)
        got, want = runner([x, row]), _broadcasting([x, row])
        _assert_all_close(got, want)
        if policy == "held":
            kept.append((got, want))
        del got  # a handed-out output still held would stop the next replay (the liveness rule)
    assert runner.graph is not None and runner.uncaptured_calls == 0
    if policy == "handed_out":
        assert 0 in runner._alias_idx and 2 in runner._alias_idx, "the broadcast outputs are handed out"
    for got, want in kept:  # held outputs were cloned: earlier calls' results keep their values
        _assert_all_close(got, want)


def _assert_all_close(got: Sequence[torch.Tensor], want: Sequence[torch.Tensor]) -> None:
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b)


def test_a_graph_of_factory_ops_only_takes_its_device(cache_dir: Path) -> None:
    # no tensor input to name the device (torch.arange(n, device="cuda") compiled alone): the
    # runner was refused ("needs every tensor input on one CUDA device, got no tensors")
    def call(args: list[Any]) -> tuple[Any, ...]:
        return (torch.arange(6, device="cuda") * 2.0, torch.full((2, 3), 7, device="cuda"))

    runner = CudaGraphRunner(call, [], CaptureSpec(device=torch.device("cuda")))
    assert runner.capture_error is None and runner.graph is not None
    for _ in range(2):
        got = runner([])
        assert torch.equal(got[0], torch.arange(6, device="cuda") * 2.0)
        assert torch.equal(got[1], torch.full((2, 3), 7, device="cuda"))
    with pytest.raises(ValueError, match="no tensors"):
        CudaGraphRunner(call, [])


def test_a_failed_capture_leaves_random_numbers_usable(cache_dir: Path) -> None:
    # a host sync invalidates the capture; torch 2.11 then left the default generator marked as
    # capturing, and every later random op raised ("Offset increment outside graph capture")
    def call(args: list[Any]) -> tuple[Any, ...]:
        x = args[0] * 2
        return (x + torch.rand_like(x) * 0 + x.sum().item(),)

    x0 = torch.randn(8, device="cuda")
    runner = CudaGraphRunner(call, [x0])
    assert runner.capture_error is not None
    torch.manual_seed(0)
    a = torch.randn(4, device="cuda")
    torch.manual_seed(0)
    assert torch.equal(torch.randn(4, device="cuda"), a)  # the generator works, and reseeds
    torch.testing.assert_close(runner([x0.clone()])[0], x0 * 2 + (x0 * 2).sum())


# ------------------------------------------------ hold_outputs=False (training graphs' mode)

MiB = 1 << 20


def _forward(args: list[Any]) -> tuple[Any, ...]:
    """A forward: its big output `a` is what a backward reads (a saved activation), `y` the user's."""
    x, w = args
    args.clear()
    a = torch.tanh(x @ w)  # 16 MiB
    return (a, a.sum(1))


def _backward(args: list[Any]) -> tuple[Any, ...]:
    """A backward in coil's boxed style: each input is freed after its last read, so its memory
    can hold what comes after (here `c`, as big as `a`)."""
    a, g = args
    args.clear()
    b = a * g[:, None]
    del a
    c = torch.sin(b) + 1
    del b
    return (c.sum(0),)


def _fw_bw_pair() -> tuple[Any, Any, torch.Tensor]:
    w = torch.nn.Parameter(torch.randn(1024, 1024, device="cuda") / 32)
    """A forward and its backward under coil.backend's training policy: both capture at their
    second call, the backward reading the forward's first-call outputs in place."""
    return (cudagraphify(_forward, policy=ReplayPolicy(borrow_inputs=True, hold_outputs=False)),
            cudagraphify(_backward, policy=ReplayPolicy(borrow_inputs=True, hold_outputs=False)), w)


def _step_inputs(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator(device="cuda").manual_seed(step)
    return (torch.randn(4096, 1024, device="cuda", generator=g),
            torch.randn(4096, device="cuda", generator=g))


def _step(fw: Any, bw: Any, x: torch.Tensor, w: torch.Tensor, g: torch.Tensor, keep: bool = False
          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """One forward and backward, the backward's list holding the only reference to `a` (as
    AOTAutograd passes saved activations), unless `keep` keeps another tensor over it.
    Returns (y, the backward's output, the kept tensor)."""
    outs = fw([x, w])
    y = outs[1]
    kept = outs[0].view(-1) if keep else None
    args = [outs[0], g]
    del outs
    (out,) = bw(args)
    return y, out, kept


def _expected(x: torch.Tensor, w: torch.Tensor, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    with torch.no_grad():
        a = torch.tanh(x @ w)
        return a.sum(1), (torch.sin(a * g[:, None]) + 1).sum(0)


def test_handed_out_outputs_are_consumed_by_the_backward_and_replay_right(recording: Any, cache_dir: Path) -> None:
    fw, bw, w = _fw_bw_pair()
    with recording() as made:
        for step in range(4):
            x, g = _step_inputs(step)
            y, out, _ = _step(fw, bw, x, w, g)
            want_y, want_out = _expected(x, w, g)
            torch.testing.assert_close(y, want_y, rtol=1e-4, atol=1e-4)
            torch.testing.assert_close(out, want_out, rtol=1e-3, atol=1e-3)
            del y, out
    f, b = made
    assert f.graph is not None and b.graph is not None
    assert b.borrowed == (0,) and b._pool == f._pool, "the backward reads `a` in place, in the forward's pool"
    assert f.uncaptured_calls == 0 and b.uncaptured_calls == 0
    assert all(o is None for k, o in enumerate(f.graph_outputs) if k in f._alias_idx), "the forward holds nothing"


def _pool_bytes(pool: Any) -> int:
    return sum(seg["total_size"] for seg in torch.cuda.memory_snapshot()
               if tuple(seg.get("segment_pool_id", (0, 0))) == tuple(pool))


def test_backward_capture_reuses_the_consumed_input(recording: Any, cache_dir: Path) -> None:
    """The same pair captured with held outputs (the forward keeps `a`) and handed-out ones (the
    backward consumes `a`): with `a` consumed, the backward's last 16 MiB buffer `c` takes `a`'s
    memory, so the shared pool holds one 16 MiB block less."""
    reserved = {}
    for hold in (True, False):
        w = torch.nn.Parameter(torch.randn(1024, 1024, device="cuda") / 32)
        if hold:
            fw = cudagraphify(_forward, policy=ReplayPolicy(borrow_inputs=True, static_outputs=(0,)))
            bw = cudagraphify(_backward, policy=ReplayPolicy(borrow_inputs=True, static_outputs="fresh"))
        else:
            fw, bw, w = _fw_bw_pair()
        with recording() as made:
            x, g = _step_inputs(0)
            for _ in range(3):  # the backward runs uncaptured, is captured, replays
                y, out, _ = _step(fw, bw, x, w, g)
                torch.testing.assert_close(out, _expected(x, w, g)[1], rtol=1e-3, atol=1e-3)
                del y, out
        torch.cuda.synchronize()
        f, b = made
        assert b._pool == f._pool and b.borrowed == (0,) and f.graph is not None and b.graph is not None
        assert b.consumed == (() if hold else (0,))
        reserved[hold] = _pool_bytes(f._pool)
        del fw, bw, f, b, made
    assert reserved[False] + 12 * MiB <= reserved[True], {k: v / MiB for k, v in reserved.items()}


def test_an_output_kept_past_the_backward_is_not_overwritten(recording: Any, cache_dir: Path) -> None:
    """Steps 0 and 1 drop `a` inside the backward (so the backward's capture, in step 1, put `c`
    in its memory); later steps keep another reference to `a`: the backward must then run
    uncaptured (its replay would overwrite `a`), and `a` must keep the forward's value."""
    fw, bw, w = _fw_bw_pair()
    with recording() as made:
        for step in (0, 1):
            x, g = _step_inputs(step)
            _step(fw, bw, x, w, g)
        for step in (2, 3):
            x, g = _step_inputs(step)
            y, out, kept = _step(fw, bw, x, w, g, keep=True)  # another tensor over a's memory
            want = torch.tanh(x @ w)
            assert kept is not None
            torch.testing.assert_close(kept.view(4096, 1024), want, rtol=1e-4, atol=1e-4)
            torch.testing.assert_close(out, _expected(x, w, g)[1], rtol=1e-3, atol=1e-3)
            del kept, y, out
    f, b = made
    assert 0 in b.consumed
    assert b.uncaptured_calls == 2
    # nothing kept: the pair replays again
    x, g = _step_inputs(4)
    _, out, _ = _step(fw, bw, x, w, g)
    torch.testing.assert_close(out, _expected(x, w, g)[1], rtol=1e-3, atol=1e-3)
    assert b.uncaptured_calls == 2 and f.uncaptured_calls == 0


def test_outputs_held_by_a_reference_cycle_do_not_stop_replays(recording: Any, cache_dir: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A first-call output that only a reference cycle holds (automatic collection off, as when
    full collections are rare) is freed by the runner's one `gc.collect()`, and the pair replays;
    an output the caller really keeps is copied out of the graph's memory once (keeping its
    value) and the pair goes on replaying, with no second collection."""
    import gc

    collections: list[int] = []
    real_collect = gc.collect
    monkeypatch.setattr(gc, "collect", lambda *a: collections.append(1) or real_collect(*a))
    fw, bw, w = _fw_bw_pair()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        with recording() as made:
            x, g = _step_inputs(0)
            _step(fw, bw, x, w, g)  # uncaptured: the pair captures at its second call
            x, g = _step_inputs(1)
            y, _, _ = _step(fw, bw, x, w, g)
            cycle: list[Any] = [y]
            cycle.append(cycle)
            del cycle, y
            x, g = _step_inputs(2)
            y, out, _ = _step(fw, bw, x, w, g)
            torch.testing.assert_close(y, _expected(x, w, g)[0], rtol=1e-4, atol=1e-4)
            torch.testing.assert_close(out, _expected(x, w, g)[1], rtol=1e-3, atol=1e-3)
            f, b = made
            assert f.uncaptured_calls == 0 and b.uncaptured_calls == 0 and len(collections) == 1
            kept, want_kept = y, _expected(x, w, g)[0]  # really in use: no replay may overwrite it
            del y, out  # (the backward's outputs are not in use)
            for step in (3, 4):
                x, g = _step_inputs(step)
                y, out, _ = _step(fw, bw, x, w, g)
                torch.testing.assert_close(out, _expected(x, w, g)[1], rtol=1e-3, atol=1e-3)
                del y, out
            # the kept output moved once, before step 3's replay; collected once. A torch that
            # cannot move a replay's outputs runs both steps uncaptured while `kept` lives (and
            # holds that output when it hands it out from then on)
            assert f.handouts is not None and len(collections) == 1
            if can_swap(torch.UntypedStorage(0)):
                assert f.uncaptured_calls == 0 and b.uncaptured_calls == 0 and f.handouts.evacuated == 1
            else:
                assert f.uncaptured_calls == 2 and b.uncaptured_calls == 2 and f.handouts.held
            torch.testing.assert_close(kept, want_kept, rtol=1e-4, atol=1e-4)
    finally:
        if was_enabled:
            gc.enable()


def _with_loss(args: list[Any]) -> tuple[Any, ...]:
    """A forward whose outputs are a saved activation and a one-element loss (under no_grad, as
    AOTAutograd runs a compiled forward: an autograd graph on the loss would hold `a`)."""
    x, w = args
    args.clear()
    with torch.no_grad():
        a = torch.tanh(x @ w)
        return (a, a.square().mean())


def test_a_kept_one_element_output_does_not_stop_the_replay(recording: Any, cache_dir: Path) -> None:
    """Training loops keep each step's loss (`losses.append(loss.detach())`): a one-element output
    is cloned per call, not handed out, so keeping it neither stops the next replay nor sees its
    value overwritten; the big output is still handed out."""
    w = torch.nn.Parameter(torch.randn(1024, 1024, device="cuda") / 32)
    fw = cudagraphify(_with_loss, policy=ReplayPolicy(hold_outputs=False))
    losses, wanted = [], []
    with recording() as made:
        for step in range(4):
            x, _ = _step_inputs(step)
            a, loss = fw([x, w])
            losses.append(loss.detach())
            with torch.no_grad():
                want = torch.tanh(x @ w)
            torch.testing.assert_close(a, want, rtol=1e-4, atol=1e-4)
            wanted.append(want.square().mean())
            del a
    (f,) = made
    assert f.graph is not None and f.uncaptured_calls == 0
    assert f._alias_idx == (0,), "the activation is handed out, the loss is not"
    torch.testing.assert_close(torch.stack(losses), torch.stack(wanted), rtol=1e-4, atol=1e-5)


def _fragmenting(args: list[Any]) -> tuple[Any, ...]:
    """Two 30 MiB buffers freed, then one of 50 MiB: it fits where the two were only if their
    memory merges (one expandable segment), not in two 30 MiB segments of their own."""
    x = args[0]
    n = 30 * MiB // 4
    a = x.new_full((n,), 1.0)
    b = x.new_full((n,), 2.0)
    s = a.sum() + b.sum()
    del a, b
    c = x.new_zeros((50 * MiB // 4,))
    c.add_(s + x[0])  # in place: no third big buffer
    return (c[-4:].clone(),)


def test_the_graph_pool_is_expandable_and_the_ordinary_pool_is_not(cache_dir: Path) -> None:
    """With expandable segments for the capture (the default) the pool holds about the capture's
    live peak (60 MiB and small blocks, not 30 + 30 + 50), its segments are expandable, the ordinary pool's
    segments created afterwards are not, and the replays compute what eager does."""
    from coil.runtime.pool_segments import expandable_now

    if expandable_now():
        pytest.skip("this process already creates expandable segments (PYTORCH_CUDA_ALLOC_CONF)")
    reserved = {}
    for on in (True, False):
        with knobs.override(graph_pool_expandable=on):
            runner = CudaGraphRunner(_fragmenting, [torch.zeros(8, device="cuda")])
            for k in range(3):
                x = torch.full((8,), float(k), device="cuda")
                out = runner([x])[0]
                torch.testing.assert_close(out, _fragmenting([torch.full((8,), float(k), device="cuda")])[0])
        assert runner.graph is not None
        torch.cuda.synchronize()
        segs = [s for s in torch.cuda.memory_snapshot()
                if tuple(s.get("segment_pool_id", (0, 0))) == tuple(runner._pool)]
        assert all(s.get("is_expandable", False) == on for s in segs), segs
        reserved[on] = _pool_bytes(runner._pool)
        del runner
    assert expandable_now() is False
    after = torch.empty(12 * MiB, dtype=torch.uint8, device="cuda")
    ordinary = [s for s in torch.cuda.memory_snapshot() if s["address"] <= after.data_ptr() < s["address"] + s["total_size"]]
    assert ordinary and not ordinary[0].get("is_expandable", False)
    assert reserved[True] <= 72 * MiB < 100 * MiB <= reserved[False], {k: v / MiB for k, v in reserved.items()}


def _split_pair(args: list[Any]) -> tuple[Any, ...]:
    """Three outputs: a buffer, a view of it, and a second buffer (the lazy-clone cases)."""
    (x,) = args
    args.clear()
    y = x * 2 + 1
    return (y, y[:, :3], x.sum(1))


def _split_pair_ref(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    y = x * 2 + 1
    return (y, y[:, :3], x.sum(1))


def test_lazy_clones_copy_only_what_the_caller_keeps(cache_dir: Path) -> None:
    """lazy_clones=True: outputs are the graph's memory until the next replay; one the caller
    keeps is copied away first (its values and aliasing stay), one it drops is not copied; a view
    the caller made stops the handing out (one uncaptured call, then clones)."""
    runner = CudaGraphRunner(_split_pair, [torch.randn(64, 8, device="cuda")], policy=ReplayPolicy(lazy_clones=True))
    runner.first_outputs = None  # the caller that built the runner takes the first result (dropped here)
    lazy = runner._lazy
    assert lazy is not None and lazy.indices == (0, 1, 2) and runner.graph is not None
    kept: list[tuple[torch.Tensor, tuple[torch.Tensor, ...]]] = []
    out = None
    for step in range(4):
        x = torch.randn(64, 8, device="cuda")
        out = runner([x])
        assert out[0].data_ptr() == runner.graph_outputs[0].data_ptr(), "handed out uncloned"
        assert out[1].data_ptr() == out[0].data_ptr(), "a view of another output still aliases it"
        if step % 2 == 0:
            kept.append((x, out))  # `out = model(x)` keeps; odd steps drop theirs before the next call
        else:
            del out
    assert runner.uncaptured_calls == 0
    assert lazy.evacuated == 2 * 2, "steps 0 and 2 kept: their two storages were copied away once each"
    for x, got in kept:
        for g, w in zip(got, _split_pair_ref(x), strict=True):
            torch.testing.assert_close(g, w)
        assert got[1].untyped_storage().data_ptr() == got[0].untyped_storage().data_ptr()
    out = runner([torch.randn(64, 8, device="cuda")])
    row = out[0][0]  # a tensor the runner cannot move
    del out
    x = torch.randn(64, 8, device="cuda")
    got = runner([x])
    assert runner.uncaptured_calls == 1 and not lazy.enabled
    torch.testing.assert_close(got[0], _split_pair_ref(x)[0])
    del row
    x = torch.randn(64, 8, device="cuda")
    got = runner([x])  # replays again, with clones
    assert runner.uncaptured_calls == 1 and got[0].data_ptr() != runner.graph_outputs[0].data_ptr()
    for g, w in zip(got, _split_pair_ref(x), strict=True):
        torch.testing.assert_close(g, w)


def _ordinary_pool_allocated() -> int:
    """Bytes allocated now outside every CUDA-graph pool (the caching allocator's own pool)."""
    torch.cuda.synchronize()
    torch.empty(1, device="cuda")  # frees whose stream uses have completed are processed
    return sum(seg["allocated_size"] for seg in torch.cuda.memory_snapshot()  # type: ignore[no-untyped-call]
               if tuple(seg.get("segment_pool_id", (0, 0))) == (0, 0))


def test_lazy_clones_hand_out_the_first_call_over_the_graph_memory(cache_dir: Path) -> None:
    """The first call's outputs are the graph's own memory, as a replay's are: right values, and
    nothing outside the pool holds outputs once the runner is built (the warm-up result is freed);
    a first result kept only by a reference cycle is collected before the next replay instead of
    being copied away."""
    import gc

    x = torch.randn(512, 1024, device="cuda")
    before = _ordinary_pool_allocated()
    runner = CudaGraphRunner(_split_pair, [x], policy=ReplayPolicy(lazy_clones=True))
    first, runner.first_outputs = runner.first_outputs, None
    assert first is not None and runner._lazy is not None
    assert first[0].data_ptr() == runner.graph_outputs[0].data_ptr(), "handed out over the graph's memory"
    assert first[1].data_ptr() == first[0].data_ptr()
    for g, w in zip(first, _split_pair_ref(x), strict=True):
        torch.testing.assert_close(g, w)
    del g, w
    grown = _ordinary_pool_allocated() - before
    # the copied input's static buffer (2 MiB) is the runner's only memory outside the pool; the
    # warm-up result (the 2 MiB output and its row sums) is gone
    assert grown < x.nbytes + x.nbytes // 2, grown

    class Holder:
        pass

    cycle = Holder()
    cycle.me, cycle.out = cycle, first  # type: ignore[attr-defined]
    del first, cycle
    gc.disable()  # only the runner's own collection may free the cycle
    try:
        x2 = torch.randn(512, 1024, device="cuda")
        got = runner([x2])
    finally:
        gc.enable()
    assert runner._lazy.evacuated == 0 and runner.uncaptured_calls == 0
    for g, w in zip(got, _split_pair_ref(x2), strict=True):
        torch.testing.assert_close(g, w)


def test_lazy_clones_leave_conjugate_and_input_outputs_cloned(cache_dir: Path) -> None:
    def call(args: list[Any]) -> tuple[Any, ...]:
        x, w = args
        z = torch.complex(x, -x)
        return (z.conj(), w, x * w)

    w = torch.nn.Parameter(torch.randn(4, 6, device="cuda"), requires_grad=False)
    runner = CudaGraphRunner(call, [torch.randn(4, 6, device="cuda"), w], policy=ReplayPolicy(lazy_clones=True))
    assert runner._lazy is not None and runner._lazy.indices == (2,)
    for _ in range(2):
        x = torch.randn(4, 6, device="cuda")
        got, want = runner([x, w]), call([x, w])
        for g, e in zip(got, want, strict=True):
            torch.testing.assert_close(g.resolve_conj(), e.resolve_conj())


def test_lazy_clones_stop_replaying_when_a_caller_resizes_an_output(cache_dir: Path) -> None:
    """Growing a handed-out output reallocates the storage it shares with the graph's static
    output; the runner must notice and stop replaying (a replay would write the graph's old memory
    and hand out the caller's new one)."""
    runner = CudaGraphRunner(_split_pair, [torch.randn(64, 8, device="cuda")], policy=ReplayPolicy(lazy_clones=True))
    out = runner([torch.randn(64, 8, device="cuda")])
    with pytest.warns(UserWarning, match="resized"):
        torch.add(torch.ones(100, device="cuda"), 1.0, out=out[2])
    x = torch.randn(64, 8, device="cuda")
    got = runner([x])
    assert runner.capture_error is not None and runner.graph is None
    for g, w in zip(got, _split_pair_ref(x), strict=True):
        torch.testing.assert_close(g, w)
    assert torch.equal(out[2], torch.full((100,), 2.0, device="cuda")), "the caller's tensor is its own"
