"""Kernels that read inputs through a table of addresses (coil.triton_codegen.indirect), run
under Triton's interpreter against the same kernel reading them directly and against eager."""

from __future__ import annotations

import pytest
import torch
from coil.triton_codegen import KernelSource
from coil.triton_codegen.indirect import indirect


def _sources(tk, fn, *inputs) -> tuple[list[KernelSource], list[torch.Tensor]]:
    sources: list[KernelSource] = []
    out = tk.run(fn, *inputs, sources=sources)
    return sources, out


def test_a_kernel_reads_its_inputs_at_the_addresses_in_the_table(tk):
    def fn(x, y, w):
        return ((x * 2 + y.float()) * w,)

    x, y, w = torch.randn(6, 40), torch.randn(6, 40).to(torch.bfloat16), torch.randn(40)
    sources, _ = _sources(tk, fn, x, y, w)
    (ks,) = sources
    # the graph inputs are named arg0.. in the lowered graph: read x and y through slots 2 and 0
    reads = {ks.pointer_args[0]: (2, torch.float32), ks.pointer_args[1]: (0, torch.bfloat16)}
    ind = indirect(ks, reads, "table")
    assert ind.name == f"{ks.name}_via0_2" and ind.pointer_args[:2] == ("table", "table")
    assert ind.pointer_args[2:] == ks.pointer_args[2:] and ind.constexprs == ks.constexprs
    # the table holds the tensors' addresses: the kernel gets only the table in their place
    xc, yc = x.clone(), y.clone()
    table = torch.tensor([yc.data_ptr(), 0, xc.data_ptr()], dtype=torch.int64)
    out = torch.full((6, 40), float("nan"))
    env = {"table": table, ks.pointer_args[2]: w, ks.pointer_args[3]: out}
    tk.launch(ind, env)
    torch.testing.assert_close(out, fn(x, y, w)[0])


def test_only_inputs_the_kernel_does_not_store_to_can_be_indirect(tk):
    def fn(x):
        return (x.exp(),)

    sources, _ = _sources(tk, fn, torch.randn(8))
    (ks,) = sources
    out_name = ks.stores[0]
    with pytest.raises(ValueError, match="stores to"):
        indirect(ks, {out_name: (0, torch.float32)}, "table")
    with pytest.raises(ValueError, match="no pointer argument"):
        indirect(ks, {"nope": (0, torch.float32)}, "table")
    assert indirect(ks, {}, "table") is ks
