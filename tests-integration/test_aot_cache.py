"""torch's AOTAutograd cache serving coil (COIL_AOT_CACHE): a new process with warm caches loads
the whole AOTAutograd result (no tracing, no coil stage), results still match eager for a
training step and inference; a changed knob misses; a damaged entry is skipped and rebuilt; the
reason the cache is not used is logged."""

from __future__ import annotations

import copyreg
import io
import logging
import pickle
from pathlib import Path
from typing import Any

import pytest
import torch
from coil.backend import COMPILED, coil_backend
from coil.backend.caches.aot_cache import PortableGraph, portable_module
from coil.backend.stats import BACKEND_CALLS
from coil.knobs import knobs
from fresh_process import run_mlp
from models import MLP
from torch._subclasses.fake_tensor import FakeTensorMode

# what the fresh process reports: the worst error against eager, each backend call's AOT-cache
# verdict, torch's cache counters, what each coil graph came from, and whether the process built
# coil's decomposition table (coil.backend.pipeline.lazy_table: only AOTAutograd's tracing reads it)
REPORT = ('{"err": err, "calls": [c.aot_cache for c in BACKEND_CALLS], "counters": dict(counters["aot_autograd"]), '
          '"graphs": [{"name": s.name, "graph_cache": s.graph_cache, "aot_cache": s.aot_cache, '
          '"stages": sorted(s.stage_times), "kernels": s.kernels} for s in COMPILED], '
          '"table_built": __import__("coil.backend.pipeline.backend", fromlist=["_"])._decomposition_table.cache_info().currsize}')


def _run(root: Path, **env_extra: str) -> dict[str, Any]:
    env = {**knobs.environ(), "COIL_CACHE_DIR": str(root / "coil"), "TORCHINDUCTOR_CACHE_DIR": str(root / "inductor"),
           "COIL_FALLBACK_ON_ERROR": "0", "COIL_FRONTEND_CACHE": "0", **env_extra}  # its own test: test_frontend_cache.py
    for k in ("COIL_DEBUG_DIR", "COIL_LOGS", "COIL_AOT_CACHE", "COIL_GRAPH_CACHE", "TORCHINDUCTOR_AUTOGRAD_CACHE"):
        if k not in env_extra:
            env.pop(k, None)
    return run_mlp(REPORT, env)


def _entries(root: Path) -> list[Path]:
    return sorted(p for p in (root / "inductor" / "aotautograd").rglob("*") if p.is_file())


def test_warm_process_loads_everything_from_the_aot_cache_and_a_knob_change_misses(tmp_path: Path) -> None:
    cold = _run(tmp_path)
    assert cold["err"] < 1e-4, cold["err"]
    assert cold["calls"] == ["miss", "miss"]  # the training graph (forward + backward), the inference graph
    assert cold["counters"].get("autograd_cache_saved") == 2
    assert {g["aot_cache"] for g in cold["graphs"]} == {"miss"}
    assert len(_entries(tmp_path)) == 2
    assert cold["table_built"] == 1

    warm = _run(tmp_path)
    assert warm["err"] < 1e-4, warm["err"]
    assert warm["calls"] == ["hit", "hit"]
    assert warm["counters"].get("autograd_cache_hit") == 2 and "autograd_cache_miss" not in warm["counters"]
    assert warm["table_built"] == 0  # a warm start does not pay for the decomposition table
    assert sorted(g["name"].split("_")[0] for g in warm["graphs"]) == ["backward", "forward", "inference"]
    for g in warm["graphs"]:  # loaded: no pass, lowering, scheduling or codegen ran
        assert (g["graph_cache"], g["aot_cache"]) == ("hit", "hit"), g
        assert g["stages"] == ["load", "runtime compile"], g
    kernels = sorted((g["name"].split("_")[0], g["kernels"]) for g in cold["graphs"])
    assert sorted((g["name"].split("_")[0], g["kernels"]) for g in warm["graphs"]) == kernels

    other = _run(tmp_path, COIL_FUSION="0")  # coil's knobs are part of the key
    assert other["err"] < 1e-4, other["err"]
    assert other["calls"] == ["miss", "miss"]
    assert other["table_built"] == 1
    assert len(_entries(tmp_path)) == 4


def test_damaged_entry_is_skipped_and_rebuilt(tmp_path: Path) -> None:
    _run(tmp_path)
    entries = _entries(tmp_path)
    assert len(entries) == 2
    for path in entries:  # same length, so the pickle still parses: coil's checksum must catch it
        raw = path.read_bytes()
        at = raw.index(b"coil wrapper for ")
        path.write_bytes(raw[:at] + b"C" + raw[at + 1:])
    damaged = _run(tmp_path)
    assert damaged["err"] < 1e-4, damaged["err"]
    assert damaged["calls"] == ["miss", "miss"], damaged["calls"]
    assert damaged["counters"].get("autograd_cache_saved") == 2
    assert "checksum mismatch" in damaged["stderr"]
    again = _run(tmp_path)
    assert again["err"] < 1e-4 and again["calls"] == ["hit", "hit"], again["calls"]


def test_aot_cache_off_is_logged_and_the_old_path_runs(caplog: pytest.LogCaptureFixture) -> None:
    torch.manual_seed(0)
    model = MLP()
    x = torch.randn(8, 16)
    off = torch._functorch.config.patch(enable_autograd_cache=False)
    with caplog.at_level(logging.INFO, logger="coil.backend"), off:
        out = torch.compile(model, backend=coil_backend)(x)
    torch.testing.assert_close(out, model(x))
    assert [c.aot_cache for c in BACKEND_CALLS] == ["off"]
    assert "AOT cache not used: torch's AOTAutograd cache is off" in caplog.text
    assert COMPILED and all(s.aot_cache == "off" and s.graph_cache == "miss" for s in COMPILED)


def test_graph_run_eagerly_is_not_stored(caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch,
                                         tmp_path: Path) -> None:
    import coil.backend.pipeline.compile as compile_mod

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("lowering broken on purpose")

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    monkeypatch.setattr(compile_mod, "lower", broken)
    torch.manual_seed(0)
    model = MLP()
    x = torch.randn(8, 16)
    eagerly = pytest.warns(UserWarning, match="running this graph eagerly")
    with caplog.at_level(logging.INFO, logger="coil.backend"), eagerly, torch.no_grad():
        out = torch.compile(model, backend=coil_backend)(x)
    torch.testing.assert_close(out, model(x))
    assert [c.aot_cache for c in BACKEND_CALLS] == ["miss"]
    assert BACKEND_CALLS[0].eager_fallback is not None  # the compile raised: torch stored nothing
    assert not _entries(tmp_path)


def test_portable_graph_pickles_its_constants_by_value_under_fake_mode() -> None:
    """torch pickles entries while AOTAutograd's FakeTensorMode may be active; a constant must
    travel as bytes (torch 2.11 refuses to copy a real CUDA tensor to the CPU there), and come
    back with its dtype, size, stride, storage offset and values."""
    consts = {
        "transposed_bf16": torch.arange(6, dtype=torch.bfloat16).reshape(2, 3).t(),
        "scalar": torch.tensor(3.5),
        "expanded": torch.randn(3).expand(4, 3),
        "offset_view": torch.arange(10.0)[2:7],
        "empty": torch.empty(0, 4),
        "bool": torch.tensor([True, False]),
    }
    with FakeTensorMode():
        raw = pickle.dumps(PortableGraph("entry text", consts))
    back = pickle.loads(raw)
    assert back.text == "entry text" and set(back.constants) == set(consts)
    for name, t in consts.items():
        u = back.constants[name]
        assert (u.dtype, u.shape, u.stride(), u.storage_offset(), u.device) == (
            t.dtype, t.shape, t.stride(), t.storage_offset(), t.device), name
        assert torch.equal(u, t), name


def _strict_dumps(obj: object) -> bytes:
    """pickle.dumps, failing on any torch.Tensor pickled the default way (what torch 2.11 cannot
    do for a real CUDA tensor under FakeTensorMode)."""
    def refuse(t: torch.Tensor) -> Any:
        raise pickle.PicklingError(f"a tensor {tuple(t.shape)} pickled by default")

    buf = io.BytesIO()
    p = pickle.Pickler(buf)
    p.dispatch_table = {**copyreg.dispatch_table, torch.Tensor: refuse}
    p.dump(obj)
    return buf.getvalue()


def _module_with_tensors() -> torch.fx.GraphModule:
    g = torch.fx.Graph()
    x = g.placeholder("x")
    y = g.call_function(torch.add, (x, g.get_attr("scale")))
    g.output(g.call_function(torch.mul, (y, g.get_attr("weights"))))
    root = torch.nn.Module()
    root.scale = torch.tensor(2.5)
    root.register_buffer("weights", torch.arange(4.0).to(torch.bfloat16))
    return torch.fx.GraphModule(root, g)


def test_a_portable_graph_module_pickles_its_tensors_by_value() -> None:
    """torch 2.11 pickles the backward graph module into the entry under FakeTensorMode; its
    tensor attributes and buffers must travel as bytes, come back equal, and still compute."""
    with pytest.raises(pickle.PicklingError):
        _strict_dumps(_module_with_tensors())  # the check can fail: by default they are tensors
    gm = _module_with_tensors()
    portable_module(gm)
    with FakeTensorMode():
        raw = _strict_dumps(gm)
    back = pickle.loads(raw)
    x = torch.randn(4)
    assert torch.equal(back(x), gm(x)) and torch.equal(back.scale, gm.scale)
    assert back.weights.dtype == torch.bfloat16 and "weights" in dict(back.named_buffers())
    with pytest.raises(pickle.PicklingError):
        _strict_dumps(_module_with_tensors())  # only the module made portable changed


def test_the_backward_module_torch_stores_is_portable(monkeypatch: pytest.MonkeyPatch) -> None:
    """The module made portable is the partitioner's backward (the one torch pickles into the
    entry; the backward compiler only gets a copy), and its lifted constant pickles by value."""
    import coil.backend.caches.aot_cache as aot_cache_module

    made: list[torch.fx.GraphModule] = []
    real = aot_cache_module.portable_module

    def recording(gm: torch.fx.GraphModule) -> None:
        made.append(gm)
        real(gm)

    monkeypatch.setattr(aot_cache_module, "portable_module", recording)

    def f(x: torch.Tensor) -> torch.Tensor:
        return (x.sin() * torch.tensor([1.5, 2.5, 3.5])).sum()  # the constant: a graph attribute

    torch._dynamo.reset()
    x = torch.randn(3, requires_grad=True)
    torch.compile(f, backend=coil_backend)(x).backward()
    want = torch.cos(x.detach()) * torch.tensor([1.5, 2.5, 3.5])
    assert x.grad is not None and torch.allclose(x.grad, want)
    (bw,) = made
    held = dict(bw.named_buffers())  # the lifted constant (a buffer of the module)
    assert held and all(torch.equal(v, torch.tensor([1.5, 2.5, 3.5])) for v in held.values())
    with FakeTensorMode():
        raw = _strict_dumps(bw)
    back = dict(pickle.loads(raw).named_buffers())
    assert all(torch.equal(back[k], v) for k, v in held.items())
