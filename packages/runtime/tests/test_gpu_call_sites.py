"""GPU tests of `cudagraphify`'s call sites: one compiled graph called with several sets of static
inputs (a layer's graph called once per layer) captures one graph per set, in one memory pool
unless that would be unsafe, and every replay returns what the plain call returns (run on a GPU:
`pytest -m gpu`)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from coil.runtime import ReplayPolicy, cudagraphify

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (none found)"),
]

D = 512
ROWS = 2048


def _layer_forward(args: list[Any]) -> tuple[Any, ...]:
    """One layer: `a` is saved for the backward, `y` feeds the next layer."""
    x, w = args
    args.clear()
    a = torch.tanh(x @ w)
    return (a, a * 2)


def _layer_backward(args: list[Any]) -> tuple[Any, ...]:
    """The layer's backward in coil's boxed style (inputs freed after their last read): the
    gradient of its input from the saved `a`, the incoming gradient `g` and the weight."""
    a, g, w = args
    args.clear()
    t = g * 2 * (1 - a * a)
    del a, g
    return (t @ w.t(),)


def _weights(n: int) -> list[torch.nn.Parameter]:
    gen = torch.Generator(device="cuda").manual_seed(0)
    return [torch.nn.Parameter(torch.randn(D, D, device="cuda", generator=gen) / D ** 0.5) for _ in range(n)]


def _expected(x: torch.Tensor, ws: list[torch.nn.Parameter]) -> tuple[torch.Tensor, torch.Tensor]:
    with torch.no_grad():
        saved, y = [], x
        for w in ws:
            a = torch.tanh(y @ w)
            saved.append(a)
            y = a * 2
        g = torch.ones_like(y)
        for a, w in zip(reversed(saved), reversed(ws), strict=True):
            g = (g * 2 * (1 - a * a)) @ w.t()
        return y, g


def _checked_step(fw: Any, bw: Any, ws: list[torch.nn.Parameter], seed: int, copied: bool = False) -> None:
    """One training step through the layers' forward and backward graphs (the caller's
    `cudagraphify`s), its output and input gradient checked against `_expected`; with `copied`
    each backward gets a copy of its saved activation (at another address) instead."""
    x = torch.randn(ROWS, D, device="cuda", generator=torch.Generator(device="cuda").manual_seed(seed))
    saved, y = [], x
    for w in ws:
        a, y = fw([y, w])
        saved.append(a)
        del a
    g = torch.ones_like(y)
    for w in reversed(ws):
        a = saved.pop()
        args = [a.clone() if copied else a, g, w]
        del a
        del g
        (g,) = bw(args)
    want_y, want_g = _expected(x, ws)
    torch.testing.assert_close(y, want_y, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(g, want_g, rtol=1e-3, atol=1e-3)


def _training_graphs(forward_borrows: bool) -> tuple[Any, Any]:
    """The layer's forward and backward under the training policy (outputs handed out, the
    backward borrowing its forward's); `forward_borrows`: the forward borrows too (coil.backend's
    policy: its first site captures at its second call)."""
    fw = cudagraphify(_layer_forward, policy=ReplayPolicy(borrow_inputs=forward_borrows, hold_outputs=False))
    bw = cudagraphify(_layer_backward, policy=ReplayPolicy(borrow_inputs=True, hold_outputs=False))
    return fw, bw


@pytest.mark.parametrize("forward_borrows", [True, False], ids=["training_policy", "forward_captured_first"])
def test_a_layer_graph_called_per_layer_captures_once_per_layer(recording: Any, cache_dir: Any,
                                                                 forward_borrows: bool) -> None:
    """Training mode (outputs handed out, backward borrowing its forward's): three layers through
    one forward and one backward graph. Under coil.backend's policy (the forward borrows too)
    every graph captures in the second step, in one pool, each backward reading its layer's
    saved activation in place. With a forward whose first site captures at its first call, the
    first layer's forward has replayed before the others capture: they must not capture into
    its pool (its handed-out outputs lie in memory the allocator counts as free), and the
    results must stay right."""
    fw, bw = _training_graphs(forward_borrows)
    ws = _weights(3)
    with recording() as made:
        for step in range(4):
            _checked_step(fw, bw, ws, step)
    assert len(made) == 6, "one forward and one backward graph per layer"
    assert all(r.graph is not None and r.capture_error is None for r in made)
    if forward_borrows:
        assert sum(r.uncaptured_calls for r in made) == 0
        assert len({r._pool for r in made}) == 1, "every site's graph in the first site's pool"
        assert all(r.borrowed for r in made[3:]), "each backward reads its layer's saved activation in place"
    else:
        assert made[1]._pool != made[0]._pool, "no capture into a pool where a handing-out graph replayed"


def test_a_saved_activation_given_elsewhere_runs_uncaptured_and_right(recording: Any, cache_dir: Any) -> None:
    """A backward reads its forward's handed-out output in place. Given a copy at another address
    instead, each backward call runs without its graph and returns the right gradient; the next
    step, given the hand-outs again, replays every graph."""
    fw, bw = _training_graphs(forward_borrows=True)
    ws = _weights(3)
    with recording() as made:
        for step in range(3):
            _checked_step(fw, bw, ws, step)
        assert len(made) == 6 and all(r.borrowed for r in made[3:])
        before = [r.uncaptured_calls for r in made]
        _checked_step(fw, bw, ws, 3, copied=True)
        after = [r.uncaptured_calls for r in made]
        assert after == before[:3] + [n + 1 for n in before[3:]], (before, after)
        _checked_step(fw, bw, ws, 4)
        assert [r.uncaptured_calls for r in made] == after, "the graphs replay again"


def _scratch_then_output(args: list[Any]) -> tuple[Any, ...]:
    """An inference graph whose output takes the memory of a buffer freed before it: a later
    site's output then lies in an earlier site's scratch memory."""
    x, w = args
    args.clear()
    t = x @ w
    u = t * 2
    del t
    out = u + 1
    del u
    return (out,)


def test_a_later_sites_kept_output_survives_an_earlier_sites_replay(recording: Any, cache_dir: Any) -> None:
    """Inference with lazy clones: an output of site 2 kept while site 1 replays is copied away
    first, and keeps its values."""
    w1, w2 = _weights(2)
    run = cudagraphify(_scratch_then_output, policy=ReplayPolicy(lazy_clones=True))
    gen = torch.Generator(device="cuda").manual_seed(1)
    with recording() as made:
        for _ in range(3):  # site 2 runs uncaptured, is captured, replays
            x1, x2 = (torch.randn(ROWS, D, device="cuda", generator=gen) for _ in range(2))
            (o1,) = run([x1, w1])
            del o1
            (o2,) = run([x2, w2])  # kept
            (o1,) = run([x1, w1])
            torch.testing.assert_close(o2, x2 @ w2 * 2 + 1, rtol=1e-4, atol=1e-4)
            torch.testing.assert_close(o1, x1 @ w1 * 2 + 1, rtol=1e-4, atol=1e-4)
            del o1, o2
    site1, site2 = made
    assert site1.graph is not None and site2.graph is not None and site1._pool == site2._pool
    assert site1.uncaptured_calls == 0 and site2.uncaptured_calls == 0
    assert site2._lazy is not None and site2._lazy.evacuated >= 1, "site 1's replay copied site 2's kept output"


def test_calls_past_the_site_limit_run_uncaptured(recording: Any, cache_dir: Any) -> None:
    w1, w2 = _weights(2)
    run = cudagraphify(_scratch_then_output, max_sites=1)
    with recording() as made:
        for _ in range(3):
            for w in (w1, w2):
                x = torch.randn(ROWS, D, device="cuda")
                (o,) = run([x, w])
                torch.testing.assert_close(o, x @ w * 2 + 1, rtol=1e-4, atol=1e-4)
    assert len(made) == 1 and made[0].graph is not None and made[0].uncaptured_calls == 0


def test_by_shape_captures_once_per_size(recording: Any, cache_dir: Any) -> None:
    """A graph with symbolic sizes: its size (a tensor's shape and the int passed beside it) is
    part of the site, so each size met replays its own capture."""
    (w,) = _weights(1)

    def call(args: list[Any]) -> tuple[Any, ...]:
        x, w_, n = args
        args.clear()
        return (torch.tanh(x[:n] @ w_) + n,)

    run = cudagraphify(call, by_shape=True)
    with recording() as made:
        for _ in range(3):
            for rows in (64, 128):
                x = torch.randn(rows, D, device="cuda")
                (o,) = run([x, w, rows // 2])
                torch.testing.assert_close(o, torch.tanh(x[: rows // 2] @ w) + rows // 2, rtol=1e-4, atol=1e-4)
    assert len(made) == 2 and all(r.graph is not None and r.uncaptured_calls == 0 for r in made)


def _forward_saving_weight(args: list[Any]) -> tuple[Any, ...]:
    """A forward that saves its weight for the backward, as AOTAutograd's forwards return saved
    parameters (here transposed: a view over the parameter's memory)."""
    x, w = args
    args.clear()
    return (torch.tanh(x @ w), w.t())


def test_a_parameter_gathered_into_freed_memory_is_returned_as_itself(recording: Any, cache_dir: Any) -> None:
    """FSDP2 frees a layer's gathered parameter after use (its storage resized to nothing) and
    gathers the next layer's into the memory just freed: a site (the same address) is then
    replayed with another parameter. An output over the parameter must be over the parameter of
    this call, not the captured one, whose memory is gone (reading it was an illegal address)."""
    gen = torch.Generator(device="cuda").manual_seed(0)
    values = [torch.randn(D, D, device="cuda", generator=gen) / D ** 0.5 for _ in range(2)]
    ws = [torch.nn.Parameter(torch.empty(D, D, device="cuda")) for _ in values]
    for w in ws:
        w.untyped_storage().resize_(0)  # sharded: no memory of its own
    x = torch.randn(ROWS, D, device="cuda", generator=gen)
    fw = cudagraphify(_forward_saving_weight, policy=ReplayPolicy(borrow_inputs=True, hold_outputs=False))
    address = None
    with recording() as made:
        for layer in [0, 0, 1, 0, 1]:  # captured at the second call, replayed for both layers
            w = ws[layer]
            w.untyped_storage().resize_(D * D * 4)
            with torch.no_grad():
                w.copy_(values[layer])
            address = w.data_ptr() if address is None else address
            assert w.data_ptr() == address, "the gather lands in the memory the last one freed"
            a, wt = fw([x, w])
            assert wt.untyped_storage()._cdata == w.untyped_storage()._cdata, "over this call's parameter"
            torch.testing.assert_close(wt, values[layer].t())
            torch.testing.assert_close(a, torch.tanh(x @ values[layer]), rtol=1e-4, atol=1e-4)
            del a, wt
            w.untyped_storage().resize_(0)
    (runner,) = made
    assert runner.graph is not None and runner.uncaptured_calls == 0


def test_parameters_gathered_at_new_addresses_are_copied_in(recording: Any, cache_dir: Any,
                                                          relocate: Any) -> None:
    """FSDP2 gathers a layer's parameters wherever the allocator has room, step after step (the
    same tensors, their storage resized to nothing and back). Once the captured layers' weights
    come back at new addresses, the forward and the backward drop their graphs and capture again,
    a graph per layer (keyed by the weight's storage) that copies the weight in: they then replay
    wherever the weights land, and every step stays right."""
    ws = _weights(2)
    fw = cudagraphify(_layer_forward, policy=ReplayPolicy(borrow_inputs=True, hold_outputs=False))
    bw = cudagraphify(_layer_backward, policy=ReplayPolicy(borrow_inputs=True, hold_outputs=False))
    held: list[torch.Tensor] = []
    settled: list[int] = []
    with recording() as made:
        for step in range(6):
            if step >= 2:  # every gather from step 2 on lands elsewhere
                for w in ws:
                    relocate(w, held)
            _checked_step(fw, bw, ws, step)
            assert len(made) == (0 if step == 0 else 4 if step < 3 else 8), (step, len(made))
            if step == 3:
                settled = [r.uncaptured_calls for r in made[4:]]
    copying = made[4:]
    assert all(r.graph is not None for r in copying), [r.capture_error for r in copying]
    assert [r.uncaptured_calls for r in copying] == settled == [0] * 4, "every later call replays"
    assert [r.static_indices for r in copying] == [()] * 4, "the weight is a copied input"
