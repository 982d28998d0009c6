"""A Triton 3.6 miscompile on the GPU, kept as a standalone reproducer (no coil import).

    python bench/triton_miscompile/check.py [N]      (CUDA; N images, default 2)

kernel0.py is a kernel coil generated for ResNet-50's stem backward in channels-last bf16: the
max_pool2d(3, 2, 1) backward over int8 window offsets, fused with the ReLU mask and the cast to
fp32. Inputs are built with eager ops (batch norm + ReLU, max_pool2d_with_indices, the offsets
derived from eager's indices), and the expected output is eager's
max_pool2d_with_indices_backward, masked. Prints, per (XBLOCK, num_warps), the fraction of
outputs off by more than 0.1 and the kernel time (triton.testing.do_bench, median).

With Triton 3.6, XBLOCK 1024 with 4 warps and 512 with 2 warps (8 elements a thread) route a
whole window's gradient to the wrong input for a few percent of the outputs; other
configurations, the same text under TRITON_INTERPRET=1, and the text with any one of its nine
accumulations dropped or with int64 indices are right. This is why coil's pointwise rule
(triton-codegen `config.choose`) gives 1024-wide blocks 2 warps and offers 1024 / 4 only to
kernels with plain loads. The figures of the last run are in docs/perf.md; rerun it on a new
Triton to see whether the rule can go.
"""

from __future__ import annotations

import importlib.util
import os
import sys

import torch
import triton


def main(argv: list[str]) -> int:
    n_img = int(argv[1]) if len(argv) > 1 else 2
    here = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.util.spec_from_file_location("coil_kernel0", os.path.join(here, "kernel0.py"))
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    kern = mod.kernel0_max_pool2d_with_indices_backward_le_where
    cl = torch.channels_last
    dev = "cuda"
    torch.manual_seed(0)
    x = torch.randn(n_img, 64, 112, 112, device=dev).to(torch.bfloat16).to(memory_format=cl)
    z = torch.relu(torch.nn.functional.batch_norm(x.float(), None, None, training=True))
    z = z.to(torch.bfloat16).contiguous(memory_format=cl)
    y, idx = torch.nn.functional.max_pool2d_with_indices(z, 3, 2, 1)
    oh = torch.arange(56, device=dev).view(1, 1, 56, 1)
    ow = torch.arange(56, device=dev).view(1, 1, 1, 56)
    off = (((idx // 112) - (oh * 2 - 1)) * 3 + ((idx % 112) - (ow * 2 - 1))).to(torch.int8).contiguous(memory_format=cl)
    g = torch.randn(y.shape, device=dev).to(torch.bfloat16).contiguous(memory_format=cl)
    ref = torch.ops.aten.max_pool2d_with_indices_backward(g, z, [3, 3], [2, 2], [1, 1], [1, 1], False, idx)
    ref = torch.where(z <= 0, torch.zeros((), dtype=torch.bfloat16, device=dev), ref).float()
    print(f"torch {torch.__version__}, triton {triton.__version__}, {torch.cuda.get_device_name()}")
    for xb, nw in ((1024, 4), (1024, 8), (1024, 2), (1024, 16), (512, 2), (512, 4), (512, 8), (256, 2), (2048, 8)):
        out = torch.full(z.shape, 12345.0, device=dev).contiguous(memory_format=cl)
        n = out.numel()

        def launch(out: torch.Tensor = out, n: int = n, xb: int = xb, nw: int = nw) -> None:
            kern[(n // xb,)](off, g, z, out, n, XBLOCK=xb, num_warps=nw)

        launch()
        torch.cuda.synchronize()
        wrong = float(((out - ref).abs() > 0.1).float().mean())
        ms = triton.testing.do_bench(launch, return_mode="median")
        print(f"XBLOCK {xb:5d} warps {nw:2d}: wrong {wrong:.3e}  {ms * 1000:.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
