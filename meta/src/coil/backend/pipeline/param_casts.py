"""Casts of parameters recomputed in the backward instead of saved (after the partition).

Under autocast every matmul reads a bfloat16 copy of its fp32 weight, and the backward reads it
again (grad_input = grad_output @ W). torch's min-cut partitioner saves that copy: recomputing it
in the backward would materialise it there (a matmul operand), which it does not do. So the copy
of every weight lives from the forward to its layer's backward: at the backward's start the
whole model's weights are held a second time in bf16, on top of the fp32 parameters that stay
alive anyway.

`recompute_param_casts(fw, bw, num_fwd_outputs, static_input_indices)` changes a partitioned pair:
each saved tensor that is a dtype cast of a parameter (a static-lifetime primal, by
`static_input_indices`), possibly followed by views (`t`, `permute`, `view`, ...) and of at least
`min_bytes`, is replaced in the saved list by the parameter itself, and the backward recomputes
the cast and the views from it, just before their first use. The parameter costs nothing to save
(it is alive for the whole step); the backward pays one cast kernel per weight (reading the fp32
weight, writing the copy), and holds each copy only from its recomputation to its last use.
Returns how many saved tensors were replaced. Both modules are recompiled when any is.
"""

from __future__ import annotations

import torch
import torch.fx

aten = torch.ops.aten
prims = torch.ops.prims

CASTS = (prims.convert_element_type.default, aten._to_copy.default)
VIEWS = (aten.t.default, aten.permute.default, aten.view.default, aten._unsafe_view.default,
         aten.transpose.int, aten.reshape.default, aten.unsqueeze.default, aten.squeeze.dim,
         aten.alias.default, aten.expand.default)
MIN_BYTES = 1 << 20


def _nbytes(node: torch.fx.Node) -> int:
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        return 0
    try:
        return int(val.numel()) * val.element_size()
    except Exception:  # symbolic sizes: not recomputed
        return 0


def _chain(node: torch.fx.Node, params: set[torch.fx.Node]) -> list[torch.fx.Node] | None:
    """[cast, view, ..., node] when `node` is views of a dtype cast of a parameter, else None."""
    chain = [node]
    n = node
    while n.op == "call_function" and n.target in VIEWS:
        if not _constant_args(n):
            return None
        first = n.args[0]
        if not isinstance(first, torch.fx.Node):
            return None
        n = first
        chain.append(n)
    if n.op != "call_function" or n.target not in CASTS or not n.args or n.args[0] not in params:
        return None
    if n.target == aten._to_copy.default and set(n.kwargs) - {"dtype"}:
        return None  # a copy to another device or layout: leave it
    if not _constant_args(n):
        return None
    return chain[::-1]


def _constant_args(n: torch.fx.Node) -> bool:
    """No argument but the first is a node (sizes, dims, dtypes only)."""
    return not any(isinstance(a, torch.fx.Node) for a in (*n.args[1:], *n.kwargs.values()))


def recompute_param_casts(fw: torch.fx.GraphModule, bw: torch.fx.GraphModule, num_fwd_outputs: int,
                          static_input_indices: list[int] | None, min_bytes: int = MIN_BYTES) -> int:
    """Save parameters instead of their casts, recomputed in `bw` (module docstring)."""
    fw_inputs = [n for n in fw.graph.nodes if n.op == "placeholder"]
    params = {fw_inputs[i] for i in static_input_indices or () if i < len(fw_inputs)}
    if not params:
        return 0
    out = fw.graph.output_node()
    outs = list(out.args[0]) if isinstance(out.args[0], list | tuple) else [out.args[0]]
    bw_inputs = [n for n in bw.graph.nodes if n.op == "placeholder"]
    saved = outs[num_fwd_outputs:]
    first_use = {n: i for i, n in enumerate(bw.graph.nodes)}
    done = 0
    for k, s in enumerate(saved):
        if k >= len(bw_inputs) or not isinstance(s, torch.fx.Node) or bw_inputs[k].name != s.name:
            continue
        chain = _chain(s, params)
        if chain is None or _nbytes(s) < min_bytes:
            continue
        cast = chain[0]
        param = cast.args[0]
        assert isinstance(param, torch.fx.Node)
        old = bw_inputs[k]
        users = sorted(old.users, key=first_use.__getitem__)
        with bw.graph.inserting_before(old):
            new = bw.graph.placeholder(f"{param.name}_param")
        new.meta = dict(param.meta)
        anchor = users[0] if users else None
        value = new
        with bw.graph.inserting_before(anchor) if anchor is not None else bw.graph.inserting_after(new):
            for n in chain:
                value = bw.graph.call_function(n.target, (value, *n.args[1:]), dict(n.kwargs))  # type: ignore[arg-type]
                value.meta = dict(n.meta)
        old.replace_all_uses_with(value)
        bw.graph.erase_node(old)
        outs[num_fwd_outputs + k] = param
        done += 1
    if done:
        out.args = (tuple(outs) if isinstance(out.args[0], tuple) else outs, *out.args[1:])
        fw.graph.eliminate_dead_code()
        for g in (fw, bw):
            g.graph.lint()
            g.recompile()
    return done
