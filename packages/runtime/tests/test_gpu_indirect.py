"""GPU tests: a CUDA graph whose kernel reads an input through a pointer table
(`CaptureSpec(indirect=...)`): each replay reads the caller's new tensor in place, and the
runner makes no buffer for it.

Run on the device tool (`pytest -m gpu`); skipped where CUDA is absent.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from coil.runtime import CaptureSpec, CudaGraphRunner, KernelSpec, TensorArg, compile_kernels

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (none found)"),
]

N = 4096
SOURCE = '''import triton
import triton.language as tl


@triton.jit
def scaled_via_table(table, w, out, n, BLOCK: tl.constexpr):
    table = tl.multiple_of(tl.load(table + 1).to(tl.pointer_type(tl.float32)), 16)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, tl.load(table + offs, mask=mask) * tl.load(w + offs, mask=mask), mask=mask)
'''


class Table:
    """What a wrapper's `call.indirect` offers: input 0 is read from slot 1 of `table`."""

    def __init__(self) -> None:
        self.indices = (0,)
        self.layouts = {0: ((N,), (1,), torch.float32)}
        self.table = torch.zeros(2, dtype=torch.int64, device="cuda")
        self.writes = 0

    def prepare(self, args: list[Any]) -> torch.Tensor:
        if not torch.cuda.is_current_stream_capturing():
            self.table.copy_(torch.tensor([0, args[0].data_ptr()], dtype=torch.int64), non_blocking=True)
            self.writes += 1
        return self.table


def test_replays_read_each_callers_tensor_in_place() -> None:
    f32 = TensorArg(torch.float32)
    kernel = compile_kernels([KernelSpec("scaled_via_table", SOURCE, (TensorArg(torch.int64), f32, f32, N),
                                         {"BLOCK": 1024})], torch.device("cuda"))["scaled_via_table"]
    table = Table()

    def call(args: list[Any]) -> tuple[torch.Tensor]:
        tbl = table.prepare(args)
        x, w = args
        args.clear()
        out = torch.empty(N, device="cuda")
        kernel((N // 1024, 1, 1), tbl, w, out, N)
        del x
        return (out,)

    w = torch.nn.Parameter(torch.randn(N, device="cuda"), requires_grad=False)
    x0 = torch.randn(N, device="cuda")
    runner = CudaGraphRunner(call, [x0, w], CaptureSpec(indirect=table))
    assert runner.graph is not None and runner.indirect_indices == (0,)
    assert runner._copy_idx == () and runner._static_inputs[0] is None  # no buffer, no reference kept
    torch.testing.assert_close(runner.first_outputs[0], x0 * w)
    for _ in range(3):
        x = torch.randn(N, device="cuda")  # a new tensor, usually at a new address
        keep = torch.empty(1 << 20, device="cuda")  # moves the next allocation
        writes = table.writes
        (out,) = runner([x, w])
        assert table.writes == writes + 1  # the runner wrote the table before the replay
        torch.testing.assert_close(out, x * w)
        del keep
    assert runner.uncaptured_calls == 0
    with pytest.raises(ValueError, match="captured for"):
        runner([torch.randn(N // 2, device="cuda"), w])


SPIN_CYCLES = 100_000_000  # ~50 ms of one spinning GPU thread, captured into the graph


@pytest.mark.parametrize("through_table", [True, False], ids=["table", "copied"])
def test_a_call_from_another_stream_waits_for_the_last_replay(through_table: bool) -> None:
    """The graph spins before it reads its input. Call 1 replays on stream A; call 2 comes at once
    from stream B with another input. Unordered, B's write of that input (its address into the
    table, or its copy into the graph's static buffer) lands while A's graph spins, and call 1
    computes with call 2's input. The runner orders B after the last replay's stream."""
    f32 = TensorArg(torch.float32)
    kernel = compile_kernels([KernelSpec("scaled_via_table", SOURCE, (TensorArg(torch.int64), f32, f32, N),
                                         {"BLOCK": 1024})], torch.device("cuda"))["scaled_via_table"]
    table = Table() if through_table else None

    def call(args: list[Any]) -> tuple[torch.Tensor]:
        tbl = table.prepare(args) if table is not None else None
        x, w = args
        args.clear()
        torch.cuda._sleep(SPIN_CYCLES)
        if tbl is None:
            return (x * w,)
        out = torch.empty(N, device="cuda")
        kernel((N // 1024, 1, 1), tbl, w, out, N)
        return (out,)

    w = torch.nn.Parameter(torch.randn(N, device="cuda"), requires_grad=False)
    runner = CudaGraphRunner(call, [torch.randn(N, device="cuda"), w], CaptureSpec(indirect=table))
    assert runner.graph is not None
    x1, x2 = torch.randn(N, device="cuda"), torch.randn(N, device="cuda")
    a, b = torch.cuda.Stream(), torch.cuda.Stream()
    torch.cuda.synchronize()
    with torch.cuda.stream(a):
        (out1,) = runner([x1, w])
    with torch.cuda.stream(b):
        (out2,) = runner([x2, w])
    torch.cuda.synchronize()
    assert runner.uncaptured_calls == 0
    torch.testing.assert_close(out1, x1 * w)
    torch.testing.assert_close(out2, x2 * w)
