"""coil's frontend cache (COIL_FRONTEND_CACHE, coil.backend.caches.frontend_cache): an inference graph
compiled once is served to a later compile of the same Dynamo graph without AOTAutograd, in a
new process too; results equal eager; grad mode and autocast are handled as AOTAutograd's
runtime wrapper does; what it cannot serve exactly (training graphs, mutated inputs, outputs
aliasing inputs, inputs passed twice, calls of a user's function) is neither stored nor served;
a changed input, state or knob misses; a damaged entry is rebuilt; a failed write fails nothing."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from coil.backend import COMPILED, coil_backend
from coil.backend.caches.frontend_cache import NAMESPACE
from coil.backend.stats import BACKEND_CALLS
from coil.knobs import knobs
from coil.runtime import disk_cache
from fresh_process import run_mlp

REPORT = ('{"err": err, "calls": [[c.frontend_cache, c.frontend_stored, c.aot_cache] for c in BACKEND_CALLS], '
          '"counters": dict(counters["aot_autograd"]), '
          '"graphs": [[s.name, s.graph_cache, s.aot_cache, s.frontend_cache, sorted(s.stage_times)] for s in COMPILED]}')


@pytest.fixture(autouse=True)
def _without_torchs_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    # torch's AOTAutograd cache lives outside the per-test folder: a hit there compiles nothing
    # the frontend cache could store (test_aot_cache.py tests it; the first test here uses both)
    monkeypatch.setenv("COIL_AOT_CACHE", "0")


def _entries() -> list[Path]:
    return sorted((knobs.cache_dir / NAMESPACE).rglob("*.blob"))


def test_a_new_process_runs_the_inference_graph_without_aotautograd(tmp_path: Path) -> None:
    env = {**knobs.environ(), "COIL_CACHE_DIR": str(tmp_path / "coil"), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "ind"),
           "COIL_FALLBACK_ON_ERROR": "0"}
    for k in ("COIL_DEBUG_DIR", "COIL_LOGS", "COIL_AOT_CACHE", "COIL_GRAPH_CACHE", "COIL_FRONTEND_CACHE"):
        env.pop(k, None)
    cold = run_mlp(REPORT, env)
    warm = run_mlp(REPORT, env)
    assert cold["err"] < 1e-4 and warm["err"] < 1e-4, (cold["err"], warm["err"])
    # the training call is not the frontend cache's; the inference call is stored, then served
    # [frontend, stored or why not, torch's]
    training = "a training graph (grad mode on, an input requires grad)"
    assert cold["calls"] == [["off", training, "miss"], ["miss", "stored", "miss"]]
    assert warm["calls"] == [["off", training, "hit"], ["hit", "", "off"]]
    inference = warm["graphs"][-1]
    assert inference[1:4] == ["hit", "off", "hit"] and inference[4] == ["load", "runtime compile"], inference
    # AOTAutograd ran once in the warm process: for the training graph, served by torch's cache
    assert warm["counters"].get("autograd_cache_hit") == 1 and "autograd_cache_miss" not in warm["counters"]
    assert len(list((tmp_path / "coil" / NAMESPACE).rglob("*.blob"))) == 1


def _compile(fn: Callable[..., Any], *args: Any, grad: bool = False, amp: bool = False) -> tuple[Any, Any]:
    """`fn` compiled afresh with coil and eager on `args`, in the same grad and autocast state
    (autocast on the inputs' device type): (compiled output, eager output)."""
    torch._dynamo.reset()
    with torch.set_grad_enabled(grad), torch.autocast(args[0].device.type, torch.bfloat16, enabled=amp):
        got = torch.compile(fn, backend="coil")(*args)
        want = fn(*args)
    return got, want


def _last() -> tuple[str, str]:
    c = BACKEND_CALLS[-1]
    return c.frontend_cache, c.frontend_stored


def _mlp(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.gelu(x @ w1).softmax(-1) @ w2


def _inputs(device: torch.device, rows: int = 8, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(0)
    return tuple(torch.randn(*shape, generator=g, dtype=dtype).to(device) for shape in ((rows, 16), (16, 32), (32, 8)))


def test_hit_equals_eager_and_changes_miss(device: torch.device) -> None:
    got, want = _compile(_mlp, *_inputs(device))
    assert _last() == ("miss", "stored")
    torch.testing.assert_close(got, want)
    got, want = _compile(_mlp, *_inputs(device))
    assert _last() == ("hit", "")
    assert COMPILED[-1].frontend_cache == "hit" and COMPILED[-1].graph_cache == "hit"
    torch.testing.assert_close(got, want)
    assert len(_entries()) == 1
    for changed in (lambda: _compile(_mlp, *_inputs(device, rows=4)),                   # a shape
                    lambda: _compile(_mlp, *_inputs(device, dtype=torch.float64)),      # a dtype
                    lambda: _compile(_mlp, *(t.t().contiguous().t() for t in _inputs(device))),  # strides
                    lambda: _compile(_mlp, *_inputs(device), grad=True),              # grad mode
                    lambda: _without_cudnn(lambda: _compile(_mlp, *_inputs(device)))):  # torch.backends
        got, want = changed()
        assert _last() == ("miss", "stored")
        torch.testing.assert_close(got, want)
    with knobs.override(fusion=False):
        got, want = _compile(_mlp, *_inputs(device))
    assert _last() == ("miss", "stored")
    assert len(_entries()) == 7
    with knobs.override(frontend_cache=False):
        _compile(_mlp, *_inputs(device))
    assert _last() == ("off", "COIL_FRONTEND_CACHE=0")


def _without_cudnn(fn: Callable[[], Any]) -> Any:
    with torch.backends.cudnn.flags(enabled=False):
        return fn()


def test_grad_mode_is_restored_after_a_hit(device: torch.device) -> None:
    x, w1, w2 = _inputs(device)
    w1.requires_grad_(False)
    for status in ("miss", "hit"):
        got, want = _compile(_mlp, x, w1, w2, grad=True)  # grad on, no input requires grad: inference
        assert _last()[0] == status
        assert not got.requires_grad and torch.is_grad_enabled()
        torch.testing.assert_close(got, want)


def _fp32_island(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    h = torch.relu(x @ w1)  # bf16 under autocast
    with torch.autocast(x.device.type, enabled=False):
        return h.float() @ w2.float()  # fp32: an extern matmul autocast must not touch again


def test_autocast_is_off_inside_a_hit(device: torch.device) -> None:
    # AOTAutograd traced autocast's casts into the graph: its runtime wrapper runs the graph with
    # autocast off, or an fp32 extern matmul would be cast to bf16 at run time
    for status in ("miss", "hit"):
        got, want = _compile(_fp32_island, *_inputs(device), amp=True)
        assert _last() == (status, "stored" if status == "miss" else "")
        assert got.dtype == want.dtype == torch.float32
        torch.testing.assert_close(got, want)


def _mutates(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    x.add_(1)
    return x @ w


def _aliases(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return x.t(), x @ w


@pytest.mark.parametrize(("fn", "why"), [(_mutates, "input 0 is mutated"), (_aliases, "output 0 is alias_of_input")])
def test_graphs_needing_aotautograds_runtime_are_not_stored(fn: Callable[..., Any], why: str,
                                                           device: torch.device) -> None:
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(4, 8, generator=g).to(device), torch.randn(8, 8, generator=g).to(device)
    for _ in range(2):
        xc, xe = x.clone(), x.clone()
        torch._dynamo.reset()
        with torch.no_grad():
            got = torch.compile(fn, backend="coil")(xc, w)
            want = fn(xe, w)
        assert _last() == ("miss", why)
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(xc, xe)
    assert _entries() == []


def test_a_failed_write_leaves_the_compile_alone(device: torch.device, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any) -> None:
        raise OSError("read-only file system")

    monkeypatch.setattr(disk_cache, "write_blob", refuse)
    got, want = _compile(_mlp, *_inputs(device))
    assert _last() == ("miss", "could not write it: OSError: read-only file system")
    torch.testing.assert_close(got, want)
    assert _entries() == []


@torch._dynamo.allow_in_graph
def _users_own(x: torch.Tensor) -> torch.Tensor:
    return x * 3  # its code may change between processes; a key knows it by name only


def test_a_graph_calling_a_users_function_is_off(device: torch.device) -> None:
    x = torch.randn(4, 8, device=device)
    got, want = _compile(lambda t: _users_own(t) + 1, x)
    assert BACKEND_CALLS[-1].frontend_cache == "off"
    assert "AOTAutograd cache would refuse this graph" in BACKEND_CALLS[-1].frontend_stored
    torch.testing.assert_close(got, want)
    assert _entries() == []


def test_training_graph_and_duplicate_inputs_are_off() -> None:
    x = torch.randn(4, 8)
    w = torch.randn(8, 8, requires_grad=True)
    _compile(lambda a, b: (a @ b).sum(), x, w, grad=True)
    assert (BACKEND_CALLS[-1].frontend_cache, BACKEND_CALLS[-1].frontend_stored) == (
        "off", "a training graph (grad mode on, an input requires grad)")
    sq = torch.randn(8, 8)
    gm = torch.fx.symbolic_trace(lambda a, b: (a @ b,))
    with torch.no_grad():
        torch.testing.assert_close(coil_backend(gm, [sq, sq])(sq, sq)[0], sq @ sq)
    assert (BACKEND_CALLS[-1].frontend_cache, BACKEND_CALLS[-1].frontend_stored) == ("off", "input 1 is passed twice")
    assert _entries() == []


@pytest.mark.parametrize("how", ["flipped", "format", "bad_kernel"])
def test_damaged_entry_is_rebuilt(how: str, device: torch.device) -> None:
    _compile(_mlp, *_inputs(device))
    (entry,) = _entries()
    raw = entry.read_bytes()
    if how == "flipped":
        entry.write_bytes(raw[:-50] + bytes([raw[-50] ^ 1]) + raw[-49:])
    else:
        doc = json.loads(raw.partition(b"\n")[2])
        if how == "format":
            doc["format"] = 999
        else:
            graph = json.loads(doc["graph"])
            graph["kernels"][0]["source"] = "this is not python ("
            doc["graph"] = json.dumps(graph)
        disk_cache.write_blob(entry, entry.stem, json.dumps(doc))
    got, want = _compile(_mlp, *_inputs(device))
    assert _last() == ("miss", "stored")
    torch.testing.assert_close(got, want)
    assert entry.read_bytes() != raw  # written again, and served:
    got, want = _compile(_mlp, *_inputs(device))
    assert _last() == ("hit", "")
    torch.testing.assert_close(got, want)


class _Scaled(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        self.register_buffer("scale", torch.full((8,), 2.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x) * self.scale


def test_a_hit_keeps_the_static_inputs_aotautograd_found(device: torch.device) -> None:
    # a module's parameters and buffers are used in place by a CUDA graph (GraphStats.static_inputs,
    # read from AOTAutograd on a miss); a hit must list the same inputs, or each replay copies them
    m = _Scaled().to(device).eval()
    x = torch.randn(4, 8, device=device)
    found = []
    for status in ("miss", "hit"):
        got, want = _compile(m, x)
        assert _last()[0] == status
        torch.testing.assert_close(got, want)
        found.append(COMPILED[-1].static_inputs)
    assert found[0] == found[1] and len(found[0]) == 3, found  # weight, bias, the buffer
