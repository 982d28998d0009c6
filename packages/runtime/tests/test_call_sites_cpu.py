"""`cudagraphify`'s call sites on the CPU: which call builds a runner, and which calls run
directly, with CudaGraphRunner replaced by a stand-in that runs the call (no CUDA graph). The
oracle is the rule itself: a site is the static inputs' addresses (and, with `by_shape`, the
sizes); the first site builds at its first call (at its second under `borrow_inputs`), any other
when it comes back with the same storages; a site met with other storages at its addresses is
keyed by the storages too; a built site's tensors met at other addresses make every static input
a copied input, the sites keyed by their storages; `max_sites` bounds the sites. The GPU twin
with real captures is test_gpu_call_sites.py."""

from __future__ import annotations

import gc
import weakref
from typing import Any, ClassVar

import pytest
import torch
from coil.runtime import ReplayPolicy, call_sites, cudagraphify
from coil.runtime.graph_inputs import InputRoles


class StandIn:
    """Runs the call; counts its replays; remembers its example inputs' static addresses."""

    made: ClassVar[list[StandIn]] = []

    def __init__(self, call: Any, args: list[Any], spec: Any, policy: ReplayPolicy) -> None:
        self.call = call
        given = spec.static_input_indices if spec is not None else None
        self.static_indices = (tuple(i for i, a in enumerate(args) if isinstance(a, torch.nn.Parameter))
                               if given is None else tuple(given))
        self.sites = tuple(args[i].data_ptr() for i in self.static_indices)
        self.first_outputs = tuple(call(list(args)))
        self._pool = policy.pool if policy.pool is not None else ("pool", len(StandIn.made))
        self.capture_error: Exception | None = None
        self.replays = 0
        StandIn.made.append(self)

    def __call__(self, args: list[Any]) -> tuple[Any, ...]:
        self.replays += 1
        return tuple(self.call(args))

    def _run(self, args: list[Any], statics_checked: bool) -> tuple[Any, ...]:
        assert statics_checked, "a site's key covers every static input: no second check"
        return self(args)


def _roles(inputs: list[Any], spec: Any, buffers: Any) -> InputRoles:
    tensors = tuple(i for i, x in enumerate(inputs) if isinstance(x, torch.Tensor))
    static = tuple(i for i in tensors if isinstance(inputs[i], torch.nn.Parameter))
    return InputRoles(torch.device("cpu"), tensors, static, (), {})


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> list[StandIn]:
    StandIn.made = []
    monkeypatch.setattr(call_sites, "CudaGraphRunner", StandIn)
    monkeypatch.setattr(call_sites, "input_roles", _roles)
    return StandIn.made


def _layer(args: list[Any]) -> tuple[Any, ...]:
    x, w = args[0], args[1]
    args.clear()
    return (x @ w,)


def _params(n: int) -> list[torch.nn.Parameter]:
    return [torch.nn.Parameter(torch.randn(4, 4)) for _ in range(n)]


@pytest.mark.parametrize("borrow", [False, True], ids=["inference", "training"])
def test_one_runner_per_layer_built_when_the_layer_comes_back(made: list[StandIn], borrow: bool) -> None:
    ws = _params(3)
    run = cudagraphify(_layer, policy=ReplayPolicy(borrow_inputs=borrow))
    for step in range(3):
        for w in ws:
            x = torch.randn(2, 4)
            (y,) = run([x, w])
            torch.testing.assert_close(y, x @ w)
        built = len(made)
        # the first layer builds at once (inference) or at step 1 (training); the others at step 1
        assert built == (0 if borrow else 1) if step == 0 else built == 3, (step, built)
    assert [m.sites for m in made] == [(w.data_ptr(),) for w in ws]
    assert [m.replays for m in made] == ([1, 1, 1] if borrow else [2, 1, 1])
    assert len({m._pool for m in made}) == 1, "later sites are given the first site's pool"


def test_a_static_input_made_anew_every_call_is_never_captured(made: list[StandIn]) -> None:
    w = _params(1)[0]
    run = cudagraphify(_layer, policy=ReplayPolicy(borrow_inputs=True))
    for _ in range(4):
        fresh = torch.nn.Parameter(w.detach().clone())  # new storage each call
        x = torch.randn(2, 4)
        (y,) = run([x, fresh])
        torch.testing.assert_close(y, x @ fresh)
        del fresh
    assert made == []


def test_by_shape_sites_are_sizes_too(made: list[StandIn]) -> None:
    (w,) = _params(1)

    def call(args: list[Any]) -> tuple[Any, ...]:
        x, w_, n = args
        args.clear()
        return (x[:n] @ w_,)

    run = cudagraphify(call, by_shape=True)
    for _ in range(3):
        for rows in (4, 8):
            x = torch.randn(rows, 4)
            (y,) = run([x, w, rows // 2])
            torch.testing.assert_close(y, x[: rows // 2] @ w)
    assert len(made) == 2 and [m.replays for m in made] == [2, 1]


def test_no_site_past_the_limit_and_none_after_a_failed_first(made: list[StandIn]) -> None:
    ws = _params(3)
    run = cudagraphify(_layer, max_sites=2)
    for _ in range(3):
        for w in ws:
            x = torch.randn(2, 4)
            torch.testing.assert_close(run([x, w])[0], x @ w)
    assert len(made) == 2
    StandIn.made.clear()
    run = cudagraphify(_layer)
    x = torch.randn(2, 4)
    run([x, ws[0]])
    made[0].capture_error = RuntimeError("capture failed")
    for _ in range(2):
        for w in ws:
            x = torch.randn(2, 4)
            torch.testing.assert_close(run([x, w])[0], x @ w)
    assert len(made) == 1 and made[0].replays == 6, "every later call goes to the failed first runner"


def test_layers_gathered_into_one_memory_get_a_runner_each(made: list[StandIn]) -> None:
    """FSDP2's pattern: every layer's parameter is gathered into the same memory (the memory the
    last layer freed), as a storage of its own. The site (the address) is then keyed by the
    storages too: one runner per layer, each built when its layer comes back."""
    memory = torch.zeros(4, 4)
    values = [torch.randn(4, 4) for _ in range(3)]

    def gathered() -> torch.nn.Parameter:  # a storage of its own over `memory`
        storage = torch._C._construct_storage_from_data_pointer(memory.data_ptr(), memory.device, 64)
        return torch.nn.Parameter(torch.empty(0).set_(storage, 0, (4, 4), (4, 1)))

    ws = [gathered() for _ in values]
    assert len({w.data_ptr() for w in ws}) == 1 and len({w.untyped_storage()._cdata for w in ws}) == 3
    run = cudagraphify(_layer, policy=ReplayPolicy(borrow_inputs=True))
    for step in range(3):
        for w, v in zip(ws, values, strict=True):
            memory.copy_(v)  # the gather
            x = torch.randn(2, 4)
            (y,) = run([x, w])
            torch.testing.assert_close(y, x @ v)
        assert len(made) == (0 if step == 0 else 3), (step, len(made))
    assert [m.replays for m in made] == [1, 1, 1], "each layer replays its own runner"
    assert len({m._pool for m in made}) == 1


def test_one_layers_tensors_at_one_address_keep_one_runner(made: list[StandIn]) -> None:
    """The same storages at the same address call after call (plain parameters): a single runner,
    the storages never consulted once it is built (the site stays the addresses alone)."""
    (w,) = _params(1)
    run = cudagraphify(_layer, policy=ReplayPolicy(borrow_inputs=True))
    for _ in range(4):
        x = torch.randn(2, 4)
        torch.testing.assert_close(run([x, w])[0], x @ w)
    assert len(made) == 1 and made[0].replays == 2


def test_static_inputs_reallocated_in_place_become_copied_inputs(made: list[StandIn], relocate: Any) -> None:
    """FSDP2 frees a layer's gathered parameters (`resize_(0)` on their storage) and gathers them
    again wherever the allocator has room: the same tensors at other addresses. Once a built
    site's tensors come back so, they are copied inputs: the runners are dropped, and a site is
    then the weights' storage (which layer's weight, wherever it lies): one runner per layer,
    built when its layer comes back, replayed whatever the weight's address."""
    ws = _params(2)
    run = cudagraphify(_layer, policy=ReplayPolicy(borrow_inputs=True))
    held: list[torch.Tensor] = []
    for step in range(5):
        if step >= 2:  # from step 2 on, every gather lands elsewhere
            for w in ws:
                relocate(w, held)
        for w in ws:
            x = torch.randn(2, 4)
            torch.testing.assert_close(run([x, w])[0], x @ w)
        assert len(made) == (0 if step == 0 else 2 if step < 3 else 4), (step, len(made))
    first_two, last_two = made[:2], made[2:]
    assert [m.replays for m in first_two] == [0, 0]
    assert [m.static_indices for m in last_two] == [(), ()], "the weight is a copied input"
    assert [m.replays for m in last_two] == [1, 1], "built at step 3, replayed at step 4"
    refs = [weakref.ref(m) for m in first_two]
    del first_two
    made[:2] = []
    gc.collect()
    assert all(r() is None for r in refs), "the graph holds none of the dropped runners"
