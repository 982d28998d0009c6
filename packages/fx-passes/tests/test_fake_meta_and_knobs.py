"""The FakeTensor metadata updater and the knobs module."""

from __future__ import annotations

import pytest
import torch
from coil.fx_passes import check_graph, knobs, refresh_meta
from coil.fx_passes.knobs import FxPassesKnobs

aten = torch.ops.aten


def test_refresh_meta_propagates_incrementally(trace) -> None:
    gm = trace(lambda x: x.sum(1).exp().neg(), torch.randn(3, 4))
    s = next(n for n in gm.graph.nodes if n.target is aten.sum.dim_IntList)
    neg = next(n for n in gm.graph.nodes if n.target is aten.neg.default)
    neg_val = neg.meta["val"]
    s.args = (s.args[0], [0])  # the edit: sum over the other dim -> shape [4]
    changed = refresh_meta(gm, [s])
    assert [n.name for n in changed] == ["sum_1", "exp", "neg"]
    assert tuple(neg.meta["val"].shape) == (4,) and neg.meta["val"] is not neg_val
    check_graph(gm, pass_name="edit")


def test_refresh_meta_stops_when_nothing_changes(trace) -> None:
    gm = trace(lambda x: x.relu().exp(), torch.randn(3))
    relu = next(n for n in gm.graph.nodes if n.target is aten.relu.default)
    exp = next(n for n in gm.graph.nodes if n.target is aten.exp.default)
    old = exp.meta["val"]
    relu.target = aten.sigmoid.default  # same metadata
    assert refresh_meta(gm, [relu]) == []
    assert exp.meta["val"] is old


def test_knobs_read_env_and_override(monkeypatch: pytest.MonkeyPatch) -> None:
    k = FxPassesKnobs()
    monkeypatch.setenv("COIL_VERIFY", "0")
    monkeypatch.setenv("COIL_REINPLACE", "1")
    assert k.verify is False and k.reinplace is True
    with k.override(verify=True):
        assert k.verify is True
    assert k.verify is False
    monkeypatch.setenv("COIL_VERIFY", "maybe")
    with pytest.raises(ValueError, match="COIL_VERIFY"):
        _ = k.verify
    with pytest.raises(TypeError), k.override(nope=True):
        pass
    assert FxPassesKnobs.names() == ("verify", "reinplace", "pad_mm")


def test_verify_is_on_in_tests() -> None:
    assert knobs.verify is True
