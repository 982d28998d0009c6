"""absorb_pad: a pad of a tensor the graph also returns moves onto that tensor's own buffer (one
kernel writes both), through the views between them; values against eager in fp64, and the
cases it must leave alone."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from coil.fx_passes import check_graph, pad_matmul_strides_for
from coil.fx_passes.passes.channels_last import FREE_OUTPUTS
from coil.fx_passes.passes.pad_owner import absorb_pad
from torch.fx import GraphModule, Node
from torch.fx.experimental.proxy_tensor import make_fx

aten = torch.ops.aten


def _pads(gm: GraphModule) -> list[Node]:
    return [n for n in gm.graph.nodes if n.target is aten.constant_pad_nd.default]


def _outputs(gm: GraphModule) -> list[Node]:
    return list(next(n for n in gm.graph.nodes if n.op == "output").args[0])  # type: ignore[arg-type]


def _heads(qkv: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """timm's window attention: keys split off a projection by a copy, scores q k^T, @ v; the
    keys read by something else too (a backward's copy that two products read)."""
    q, k = qkv.unbind(0)
    k = k.clone()
    return torch.softmax(q @ k.transpose(-2, -1), -1) @ v, k.square().sum(-1)


def _heads_returning_keys(qkv: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The same, the keys returned (a forward saves them for its backward)."""
    q, k = qkv.unbind(0)
    k = k.clone()
    return torch.softmax(q @ k.transpose(-2, -1), -1) @ v, k


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    return torch.randn(2, 6, 49, 32), torch.randn(6, 49, 32)


def _run(f: Callable[..., tuple[torch.Tensor, ...]]) -> GraphModule:
    inputs = _inputs()
    gm = make_fx(f, tracing_mode="fake")(*inputs)
    gm.meta[FREE_OUTPUTS] = (1,)  # even an output free to change layout keeps its own buffer
    assert pad_matmul_strides_for(gm, devices=("cpu",), min_work=0)
    check_graph(gm, pass_name="pad_matmul_strides")
    gm.recompile()
    for got, want in zip(gm(*inputs), f(*(t.double() for t in inputs)), strict=True):
        assert got.stride() == want.stride()
        torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-4)
    return gm


def _keys_pad(gm: GraphModule) -> Node:
    return next(p for p in _pads(gm) if p.args[1] == [0, 0, 0, 3])


def test_a_copy_read_twice_is_computed_into_its_padded_buffer() -> None:
    """The pad of the keys reads their copy directly, its only reader; the other reader of the
    keys reads the padded buffer's first 49 rows."""
    gm = _run(_heads)
    keys = _keys_pad(gm)
    copy = keys.args[0]
    assert isinstance(copy, Node) and copy.target is aten.clone.default and list(copy.users) == [keys]
    (rows,) = [u for u in keys.users if u.target is aten.slice.Tensor]
    assert rows.meta["val"].stride() == (52 * 32, 32, 1)
    assert any(u.target is aten.pow.Tensor_Scalar for u in rows.users)


def test_a_returned_copy_keeps_its_buffer() -> None:
    """The keys returned: they stay their own contiguous buffer (padded, they would hold 52 rows
    until the backward), and the pad copies them."""
    gm = _run(_heads_returning_keys)
    out_k = _outputs(gm)[1]
    assert out_k.target is aten.clone.default and out_k.meta["val"].is_contiguous()
    assert _keys_pad(gm).args[0] is not out_k


def _graph(f: Callable[..., object], *shapes: tuple[int, ...]) -> GraphModule:
    return make_fx(f, tracing_mode="fake")(*(torch.randn(s) for s in shapes))


@pytest.mark.parametrize("case", ["only reader", "an input", "a reshape cuts the dim", "a view",
                                  "a reader cannot take the slice"])
def test_pads_it_leaves_alone(case: str) -> None:
    """Nothing to move: the pad is the tensor's only reader (it fuses already); the tensor is an
    input (the caller's storage); a reshape merges the padded dim; the padded tensor is a view;
    another reader's view merges the padded dim, which the slice's strides cannot (undone)."""

    def only_reader(x: torch.Tensor) -> torch.Tensor:
        return torch.constant_pad_nd(x * 2, [0, 3])

    def an_input(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.constant_pad_nd(x, [0, 3]), x + 1

    def reshape_cuts(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = x * 2
        return torch.constant_pad_nd(y.view(6 * 49), [0, 3]), y

    def a_view(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = (x * 2)[:, :40]
        return torch.constant_pad_nd(y, [0, 3]), y + 1

    def flat_reader(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = x * 2
        return torch.constant_pad_nd(y, [0, 3]), y.view(6 * 49) + 1

    f = {"only reader": only_reader, "an input": an_input, "a reshape cuts the dim": reshape_cuts,
         "a view": a_view, "a reader cannot take the slice": flat_reader}[case]
    gm = _graph(f, (6, 49))
    (pad,) = _pads(gm)
    before = str(gm.graph)
    assert not absorb_pad(gm, pad, lambda t: True)
    assert str(gm.graph) == before


def test_through_a_reshape_and_two_transposes() -> None:
    """A pad along the dim that is ``y``'s third, seen through a reshape and a transpose back and
    forth (the keys' chain in the score product): ``y`` is padded along it and the views are
    rebuilt over the padded buffer, contiguous as the pad was; ``y``'s other reader reads its
    slice."""

    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = x * 2  # [2, 3, 49, 8]
        t = y.transpose(2, 3).reshape(6, 8, 49).transpose(1, 2)  # [6, 49, 8]
        return torch.constant_pad_nd(t, [0, 0, 0, 3]), y.sum(-1)

    x = torch.randn(2, 3, 49, 8)
    gm = make_fx(f, tracing_mode="fake")(x)
    (pad,) = _pads(gm)
    assert absorb_pad(gm, pad, lambda t: True)
    check_graph(gm, pass_name="absorb_pad")
    (new,) = _pads(gm)
    assert new.args[0].target is aten.mul.Tensor and new.args[1] == [0, 0, 0, 3]  # type: ignore[union-attr]
    gm.recompile()
    got, want = gm(x), f(x.double())
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape
        torch.testing.assert_close(g.double(), w, rtol=1e-6, atol=1e-6)
    assert got[0].is_contiguous()


def test_a_pad_whose_rebuilt_views_change_its_layout_is_left_alone() -> None:
    """``y`` padded along its third dim and transposed once reads column-major, where the pad's
    result is row-major: not the same tensor to its readers, so nothing changes."""

    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = x * 2  # [6, 49, 8]
        return torch.constant_pad_nd(y.transpose(1, 2), [0, 3]), y.sum(-1)

    gm = _graph(f, (6, 49, 8))
    (pad,) = _pads(gm)
    before = str(gm.graph)
    assert not absorb_pad(gm, pad, lambda t: True)
    assert str(gm.graph) == before
