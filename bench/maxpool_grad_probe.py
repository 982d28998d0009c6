"""max_pool2d(3, 2, 1) backward through coil (on the GPU; on the CPU at a smaller size): is every output's gradient routed to
exactly one input position? (conservation: per channel, sum of grad_x == sum of grad_y, in fp64)

    python bench/maxpool_grad_probe.py [FILTER]   (set COIL_* variables to compare variants;
                                                   FILTER: run only cases whose "dtype layout pre"
                                                   label contains it, e.g. "bfloat16 cl bnrelu")

Prints, per dtype, layout and preceding op (none / relu / batch-norm+relu): the largest per-channel
conservation error relative to the channel's sum of |grad_y| for eager and coil, and the largest
difference from eager's grad_x. fp32 inputs are random normals (ties have probability ~0), so
there coil must equal eager exactly.
"""

from __future__ import annotations

import os
import sys

import torch


def main(argv: list[str]) -> int:
    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
    import coil.backend  # noqa: F401

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    shape = (32, 64, 112, 112) if dev == "cuda" else (4, 64, 56, 56)
    bn = torch.nn.BatchNorm2d(64).to(dev)
    for dtype in (torch.float32, torch.bfloat16):
        for layout in ("nchw", "cl"):
            for pre in ("none", "relu", "bnrelu"):
                if len(argv) > 1 and argv[1] not in f"{str(dtype).removeprefix('torch.')} {layout} {pre}":
                    continue
                torch.manual_seed(0)
                x0 = torch.randn(*shape, device=dev, dtype=dtype)
                if layout == "cl":
                    x0 = x0.to(memory_format=torch.channels_last)

                def f(x: torch.Tensor, pre: str = pre) -> torch.Tensor:
                    if pre == "relu":
                        x = torch.relu(x)
                    elif pre == "bnrelu":
                        x = torch.relu(torch.nn.functional.batch_norm(x, None, None, bn.weight.to(x.dtype),
                                                                      bn.bias.to(x.dtype), True))
                    return torch.nn.functional.max_pool2d(x, 3, 2, 1)

                grads = []
                for mode in ("eager", "coil"):
                    torch._dynamo.reset()
                    x = x0.detach().clone().requires_grad_(True)
                    fn = f if mode == "eager" else torch.compile(f, backend="coil")
                    y = fn(x)
                    torch.manual_seed(1)
                    g = torch.randn(y.shape, device=dev).to(dtype)
                    y.backward(g)
                    assert x.grad is not None
                    gy = g.double().sum((0, 2, 3))
                    gx = x.grad.double().sum((0, 2, 3))
                    scale = g.double().abs().sum((0, 2, 3))
                    cons = float(((gx - gy).abs() / scale).max())
                    grads.append((x.grad.double(), cons, y.double()))
                diff = float((grads[0][0] - grads[1][0]).abs().max())
                ydiff = float((grads[0][2] - grads[1][2]).abs().max())
                env = " ".join(f"{k}={v}" for k, v in os.environ.items() if k.startswith("COIL_"))
                print(f"{dtype!s:15s} {layout:5s} {pre:7s} conservation eager {grads[0][1]:.2e} coil "
                      f"{grads[1][1]:.2e}  max|grad diff| {diff:.3e}  max|y diff| {ydiff:.3e}  [{env}]",
                      flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
