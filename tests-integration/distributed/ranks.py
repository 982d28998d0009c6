"""One rank of a distributed scenario, run as a script by launch.py:

    python ranks.py <scenario> <rank> <world> <store file> <result file> <seconds>

It joins the gloo process group through the FileStore, runs the scenario twice on the same seed
and data, eagerly and compiled with backend="coil" (the model and, in training, the optimizer's
step; COIL_FALLBACK_ON_ERROR on, as users get it), and saves, with torch.save, a dict of plain
values and tensors:

- "eager", "compiled": the scenario's values of each run by name (parameters after the steps,
  losses, outputs), compared by the test;
- "graphs": per graph coil compiled on this rank, {"name", "eager_fallback" (None when compiled
  natively), "fallbacks" (ATen ops run as fallbacks), "collectives" (the `_c10d_functional` ops
  its wrapper calls, in the order it calls them)}.

The process group is destroyed however the scenario ends; a rank that saved its result exits
without interpreter finalization (`main`). A rank still running after <seconds>
prints every thread's Python stack and exits (launch.py kills it a little later).
"""

from __future__ import annotations

import copy
import datetime
import faulthandler
import gc
import os
import re
import sys
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from coil.backend import COMPILED
from coil.knobs import knobs

Values = dict[str, torch.Tensor]
Batches = list[tuple[torch.Tensor, torch.Tensor]]
STEPS = 3
LR = 0.05
# gloo's own timeout: a rank whose peer died raises instead of waiting (launch.py also kills it)
PG_TIMEOUT = datetime.timedelta(seconds=120)
COLLECTIVE = re.compile(r"torch\.ops\.(_c10d_functional\.\w+)\.\w+\(")
# the steps a wrapper runs, in order: collectives, matrix products and generated kernels
STEP = re.compile(r"torch\.ops\.(_c10d_functional\.\w+)\.\w+\(|(torch\.mm)\(|\b(k_\w+)\(\(")


class MLP(nn.Module):
    """Linear 16 -> 512, ReLU, Linear 512 -> 512, GELU, Linear 512 -> 8: over 1 MiB of
    parameters, so under DDP's smallest bucket cap that DDPOptimizer takes (1 MiB, its first
    bucket's) the graph splits in two."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(16, 512)
        self.fc2 = nn.Linear(512, 512)
        self.fc3 = nn.Linear(512, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc3(F.gelu(self.fc2(torch.relu(self.fc1(x)))))


class Layer(nn.Module):
    """A Linear, then GELU when `act`: a module of user code, so Dynamo compiles its forward as
    a frame of its own between FSDP2's hooks (which it does not trace)."""

    def __init__(self, d_in: int, d_out: int, act: bool) -> None:
        super().__init__()
        self.linear = nn.Linear(d_in, d_out)
        self.act = act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear(x)
        return F.gelu(y) if self.act else y


class TwoLayer(nn.Module):
    """Layer 16 -> 32 with GELU, then Layer 32 -> 8."""

    def __init__(self) -> None:
        super().__init__()
        self.layer1 = Layer(16, 32, True)
        self.layer2 = Layer(32, 8, False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer2(self.layer1(x))


class FeedForward(nn.Module):
    """up (16 -> 32), GELU, down (32 -> 16): the shape tensor parallelism splits column- then
    row-wise."""

    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(16, 32)
        self.down = nn.Linear(32, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(x)))


def batches(seed: int, d_in: int, d_out: int) -> Batches:
    """STEPS (input, target) pairs of 8 rows drawn from `seed`."""
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(8, d_in, generator=g), torch.randn(8, d_out, generator=g)) for _ in range(STEPS)]


def train(model: Callable[[torch.Tensor], torch.Tensor], params: Iterator[nn.Parameter], data: Batches,
          compiled: bool = False) -> torch.Tensor:
    """STEPS steps of SGD with momentum on the MSE loss, the optimizer step compiled with
    backend="coil" when `compiled`; the losses."""
    opt = torch.optim.SGD(list(params), lr=LR, momentum=0.9)
    step = torch.compile(opt.step, backend="coil") if compiled else opt.step
    losses = []
    for x, y in data:
        opt.zero_grad(set_to_none=True)
        loss = F.mse_loss(model(x), y)
        loss.backward()
        step()
        losses.append(loss.detach())
    return torch.stack(losses)


def full(model: nn.Module) -> Values:
    """Every parameter by name, DTensors gathered whole (`full_tensor()`)."""
    out: Values = {}
    for name, p in model.named_parameters():
        t = p.full_tensor() if hasattr(p, "full_tensor") else p
        out[name] = t.detach().clone()
    return out


def plain(t: torch.Tensor) -> torch.Tensor:
    """`t` as a plain tensor: eager functional collectives return AsyncCollectiveTensors, which
    wait on first use (and torch.load refuses)."""
    from torch.distributed._functional_collectives import AsyncCollectiveTensor

    return t.wait() if isinstance(t, AsyncCollectiveTensor) else t


def ddp(rank: int) -> tuple[Values, Values]:
    """DDP of MLP with 1 MiB buckets, per-rank data; the compiled run is torch.compile of the
    DDP module (DDPOptimizer splits its graph at the bucket boundary)."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    base = MLP()
    data = batches(100 + rank, 16, 8)
    runs = []
    for compiled in (False, True):
        model = DDP(copy.deepcopy(base), bucket_cap_mb=1)
        call = torch.compile(model, backend="coil") if compiled else model
        losses = train(call, model.parameters(), data, compiled)
        runs.append({"loss": losses, **full(model.module)})
    return runs[0], runs[1]


def fsdp2(rank: int) -> tuple[Values, Values]:
    """FSDP2: `fully_shard` on each Layer of TwoLayer and on the root over a CPU mesh of every
    rank (without one FSDP2 shards onto the accelerator when there is one), per-rank data; the
    compiled run is torch.compile of the root; parameters compared whole."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    base = TwoLayer()
    data = batches(200 + rank, 16, 8)
    runs = []
    for compiled in (False, True):
        model = copy.deepcopy(base)
        mesh = init_device_mesh("cpu", (dist.get_world_size(),))
        for layer in (model.layer1, model.layer2):
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        call = torch.compile(model, backend="coil") if compiled else model
        losses = train(call, model.parameters(), data, compiled)
        runs.append({"loss": losses, **full(model)})
    return runs[0], runs[1]


def tensor_parallel(rank: int) -> tuple[Values, Values]:
    """FeedForward with `up` column-parallel and `down` row-parallel over a 1-D mesh of every
    rank; the same data on every rank (tensor parallelism splits the weights, not the batch)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    torch.manual_seed(0)
    base = FeedForward()
    data = batches(300, 16, 16)
    runs = []
    for compiled in (False, True):
        model = parallelize_module(copy.deepcopy(base), mesh, {"up": ColwiseParallel(), "down": RowwiseParallel()})
        call = torch.compile(model, backend="coil") if compiled else model
        losses = train(call, model.parameters(), data, compiled)
        runs.append({"loss": losses, **full(model)})
    return runs[0], runs[1]


def collectives(x: torch.Tensor, y: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """all_reduce, all_gather_tensor and reduce_scatter_tensor between pointwise work, a matmul
    and reductions. The all-reduced `a` is read again at the end, after `s` (of a's size) was
    made: a planner that took the pre-wait buffer of `a` for `s` would overwrite `a`."""
    import torch.distributed._functional_collectives as funcol

    group = dist.group.WORLD
    a = funcol.all_reduce(torch.relu(x) * 2, "sum", group)
    s = torch.sin(y * 3)
    h = s @ w
    g = funcol.all_gather_tensor(torch.tanh(h) + a, 0, group)
    r = funcol.reduce_scatter_tensor(g * 0.5 - 1, "sum", 0, group)
    return r.sum(dim=1) + a.mean(), a * h, g


def functional(rank: int) -> tuple[Values, Values]:
    """`collectives` on per-rank inputs, eager and compiled."""
    g = torch.Generator().manual_seed(400 + rank)
    x, y, w = (torch.randn(8, 8, generator=g) for _ in range(3))
    runs = []
    for fn in (collectives, torch.compile(collectives, backend="coil")):
        out = fn(x, y, w)
        runs.append({f"output {i}": plain(t) for i, t in enumerate(out)})
    return runs[0], runs[1]


SCENARIOS: dict[str, Callable[[int], tuple[Values, Values]]] = {
    "ddp": ddp, "fsdp2": fsdp2, "tensor_parallel": tensor_parallel, "functional": functional,
}


def whole_program(source: str) -> str:
    """The wrapper's `call` function, the whole graph in one program (the source also holds one
    function per CUDA-graph segment when some step cannot be captured: the same calls again)."""
    start = source.find("    def call(")
    end = source.find("\n    def ", start + 1)
    return source[start:end if end >= 0 else len(source)]


def graphs() -> list[dict[str, Any]]:
    """What coil compiled on this rank (module docstring: "graphs")."""
    return [{"name": s.name, "eager_fallback": s.eager_fallback, "fallbacks": list(s.fallbacks),
             "collectives": COLLECTIVE.findall(whole_program(s.wrapper_source)),
             "steps": ["".join(m) for m in STEP.findall(whole_program(s.wrapper_source))]} for s in COMPILED]


def main(scenario: str, rank: int, world: int, store: str, out: str, seconds: float) -> None:
    faulthandler.enable()  # a crash (an abort in a C++ thread) still shows where Python was
    faulthandler.dump_traceback_later(seconds, exit=True)  # a hang shows where it waits
    assert knobs.triton_interpret, "launch.py starts every rank with TRITON_INTERPRET=1"
    dist.init_process_group("gloo", store=dist.FileStore(store, world), rank=rank, world_size=world,
                            timeout=PG_TIMEOUT)
    try:
        with knobs.override(fallback_on_error=True):
            eager, compiled = SCENARIOS[scenario](rank)
        torch.save({"eager": eager, "compiled": compiled, "graphs": graphs()}, out)
    finally:
        release()
    # A C++ thread of torch that frees a Python-owned tensor while the interpreter finalizes
    # aborts the process (pytorch/pytorch#190489); all is saved and released, so skip finalizing.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def release() -> None:
    """Free, while the interpreter is fully alive, everything that holds the process groups
    (compiled code, the scenario's modules and meshes in reference cycles), then the groups."""
    torch._dynamo.reset()
    gc.collect()
    dist.destroy_process_group()
    gc.collect()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5], float(sys.argv[6]))
