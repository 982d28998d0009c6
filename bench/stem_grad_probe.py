"""ResNet-50's stem alone (conv 7x7/2 -> batch norm -> ReLU -> max pool 3x3/2) under AMP bf16:
the error of bn.bias's and bn.weight's gradients against fp64, eager vs coil.

    python bench/stem_grad_probe.py [--batch N] [--size S] [--layout nchw|cl] [--drop relu,pool]

Same weights, input and upstream gradient for every run; the fp64 run is the reference.
Set COIL_* variables to compare coil variants (each process compiles once).
"""

from __future__ import annotations

import argparse
import copy
import os
import sys

import torch


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--layout", default="nchw")
    p.add_argument("--drop", default="", help="comma-separated stem parts to leave out: relu, pool")
    a = p.parse_args(argv[1:])
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    if dev == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    import coil.backend  # noqa: F401

    torch.manual_seed(0)
    drop = set(filter(None, a.drop.split(",")))
    stem = torch.nn.Sequential(torch.nn.Conv2d(3, 64, 7, 2, 3, bias=False), torch.nn.BatchNorm2d(64),
                               torch.nn.Identity() if "relu" in drop else torch.nn.ReLU(),
                               torch.nn.Identity() if "pool" in drop else torch.nn.MaxPool2d(3, 2, 1)).to(dev)
    x = torch.randn(a.batch, 3, a.size, a.size, device=dev)
    if a.layout == "cl":
        x = x.to(memory_format=torch.channels_last)
        stem = stem.to(memory_format=torch.channels_last)
    with torch.no_grad():
        g = torch.randn_like(stem(x))

    def run(model: torch.nn.Module, amp: bool, compiled: bool) -> list[torch.Tensor]:
        fn = torch.compile(model, backend="coil") if compiled else model
        xx = x.double() if next(model.parameters()).dtype == torch.float64 else x
        with torch.autocast(dev, dtype=torch.bfloat16, enabled=amp):
            y = fn(xx)
        y.backward(g.to(y.dtype))
        bn = model[1]
        return [bn.bias.grad.double(), bn.weight.grad.double(), model[0].weight.grad.double()]

    ref = run(copy.deepcopy(stem).double(), False, False)
    eager = run(copy.deepcopy(stem), True, False)
    coil_ = run(copy.deepcopy(stem), True, True)
    fp32 = run(copy.deepcopy(stem), False, True)

    def rmse(t: torch.Tensor, r: torch.Tensor) -> float:
        return float(torch.sqrt(torch.mean((t - r) ** 2)))

    env = " ".join(f"{k}={v}" for k, v in os.environ.items() if k.startswith("COIL_"))
    print(f"stem {dev} batch {a.batch} size {a.size} layout {a.layout} without {sorted(drop)} [{env or 'defaults'}]")
    for i, name in enumerate(("bn.bias", "bn.weight", "conv.weight")):
        print(f"  {name:12s} ref rms {rmse(ref[i], 0 * ref[i]):.3e}  rmse eager-amp {rmse(eager[i], ref[i]):.3e}  "
              f"coil-amp {rmse(coil_[i], ref[i]):.3e}  coil-fp32 {rmse(fp32[i], ref[i]):.3e}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
