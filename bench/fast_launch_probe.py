"""Probe for the open fast-launch bug (packages/runtime/tests/test_gpu_fast.py, strict xfail):
a chain of 4 launches of one add kernel, out = a + 4w, under each combination of fast launch,
AOT compile, side stream and `nn.Parameter` weight. Prints the mismatching elements per case and,
for each, k = (out - a) / w (k = 3 means a launch was lost or raced).

    python bench/fast_launch_probe.py           (needs CUDA)
"""

from __future__ import annotations

import itertools
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch
from coil.runtime import KernelSpec, TensorArg, compile_kernels
from coil.runtime.compile import clear_memo
from coil.runtime.knobs import override

ADD = '''\
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)
'''


def chain(kernel: Any, a: torch.Tensor, w: torch.Tensor, n: int, sync: bool) -> torch.Tensor:
    buf = a
    for _ in range(4):
        nxt = torch.empty_like(buf)
        kernel(((n + 127) // 128,), buf, w, nxt, n)
        if sync:
            torch.cuda.synchronize()
        buf = nxt
    return buf


def main() -> int:
    n = 1024
    f32 = TensorArg(torch.float32)
    spec = KernelSpec("add_kernel", ADD, (f32, f32, f32, 1024), {"BLOCK": 128})
    bad_cases = 0
    for fast, aot, side, param, sync in itertools.product((True, False), (True, False), (False, True),
                                                          (True, False), (False, True)):
        with tempfile.TemporaryDirectory() as root, override(cache_dir=Path(root), fast_launch=fast,
                                                             aot_compile=aot):
            clear_memo()
            kernel = compile_kernels([spec], torch.device("cuda"))["add_kernel"]
            w = torch.randn(n, device="cuda")
            if param:
                w = torch.nn.Parameter(w, requires_grad=False)
            worst = 0
            ks: set[float] = set()
            for _ in range(5):
                a = torch.randn(n, device="cuda")
                if side:
                    s = torch.cuda.Stream()
                    s.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(s):
                        out = chain(kernel, a, w, n, sync)
                    torch.cuda.current_stream().wait_stream(s)
                else:
                    out = chain(kernel, a, w, n, sync)
                torch.cuda.synchronize()
                want = a + 4 * w.detach()
                wrong = ~torch.isclose(out, want)
                worst = max(worst, int(wrong.sum()))
                if wrong.any():
                    k = ((out - a) / w.detach())[wrong]
                    ks |= {round(float(v), 2) for v in k[:8]}
            bad_cases += worst > 0
            print(f"fast={fast:d} aot={aot:d} side={side:d} param={param:d} sync={sync:d}: "
                  f"max wrong {worst}/{n}  k {sorted(ks)[:8]}  fast_path={kernel.fast}", flush=True)
    print(f"cases with wrong results: {bad_cases}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
