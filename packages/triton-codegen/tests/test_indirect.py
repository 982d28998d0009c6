"""Kernels that read inputs through a table of addresses (`generate(..., indirect=..., table=...)`,
indirect.py), run under Triton's interpreter against the same kernel reading them directly and
against eager; `generate_like` regenerates a kept variant so."""

from __future__ import annotations

import pytest
import torch
from coil.scheduler import KernelGroup, Schedule
from coil.triton_codegen import KernelConfig, KernelSource, generate, generate_like
from coil.triton_codegen.variants import with_config


def _group(tk, fn, *inputs) -> tuple[Schedule, KernelGroup, KernelSource]:
    s = tk.schedule(fn, *inputs)
    (group,) = s.kernels()
    return s, group, generate(group, s.graph.buffers(), "interpret")


def test_a_kernel_reads_its_inputs_at_the_addresses_in_the_table(tk):
    def fn(x, y, w):
        return ((x * 2 + y.float()) * w,)

    x, y, w = torch.randn(6, 40), torch.randn(6, 40).to(torch.bfloat16), torch.randn(40)
    s, group, ks = _group(tk, fn, x, y, w)
    # the graph inputs are named arg0.. in the lowered graph: read x and y through slots 2 and 0
    reads = {ks.pointer_args[0]: (2, torch.float32), ks.pointer_args[1]: (0, torch.bfloat16)}
    ind = generate(group, s.graph.buffers(), "interpret", indirect=reads, table="table")
    assert ind.name == f"{ks.name}_via0_2" and ind.pointer_args[:2] == ("table", "table")
    assert ind.pointer_args[2:] == ks.pointer_args[2:] and ind.constexprs == ks.constexprs
    # the body is the direct kernel's after the table loads
    assert ind.source.split("):\n", 1)[1].endswith(ks.source.split("):\n", 1)[1])
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

    s, group, ks = _group(tk, fn, torch.randn(8))
    bufs = s.graph.buffers()
    out_name = ks.stores[0]
    with pytest.raises(ValueError, match="stores to"):
        generate(group, bufs, "interpret", indirect={out_name: (0, torch.float32)}, table="table")
    with pytest.raises(ValueError, match="no pointer argument"):
        generate(group, bufs, "interpret", indirect={"nope": (0, torch.float32)}, table="table")
    with pytest.raises(ValueError, match="already takes"):
        generate(group, bufs, "interpret", indirect={ks.pointer_args[0]: (0, torch.float32)}, table=out_name)
    assert generate(group, bufs, "interpret", indirect={}, table="table") == ks


def test_generate_like_keeps_the_kept_variant_and_its_read_again_text(tk):
    """A variant under another launch configuration, of a kernel generated to read its rows
    again: generated like it with a table, only the table loads and the name differ."""
    x, w = torch.randn(4, 64), torch.randn(64)
    s, group, _ = _group(tk, lambda a, b: (torch.nn.functional.layer_norm(a, (64,), b),), x, w)
    bufs = s.graph.buffers()
    ks = generate(group, bufs, "cuda", "persistent", reread=True)
    assert ks.reread
    kept = with_config(ks, KernelConfig("persistent", 2, 64, 2))
    assert kept.constexprs != ks.constexprs or kept.num_warps != ks.num_warps
    reads = {kept.pointer_args[0]: (0, torch.float32)}
    like = generate_like(kept, group, bufs, "cuda", indirect=reads, table="table", name="k_table")
    assert (like.name, like.constexprs, like.num_warps, like.grid) == ("k_table", kept.constexprs, kept.num_warps, kept.grid)
    assert like.pointer_args == ("table", *kept.pointer_args[1:]) and like.reread
    assert like.source.split("):\n", 1)[1].endswith(kept.source.split("):\n", 1)[1])
