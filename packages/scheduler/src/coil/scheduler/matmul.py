"""Matrix products as kernel groups: an mm/addmm/bmm/baddbmm extern with its pointwise epilogue.

An `ExternKernel` matrix product (cuBLAS through ATen) writes its result to memory, and the
pointwise kernel after it (bias add, GELU, residual add, a cast) reads it back. This module finds
where one generated GEMM kernel (triton-codegen's matmul template) can compute the product tile
in registers and apply that epilogue group's members to it before anything is stored:

  - `MatmulProduct`: the product as a group member. It is a `Pointwise` over the product's
    logical positions (M, N) or (B, M, N) writing the extern's result buffer, so the standard
    planner (`group.plan`) maps it to the group's dims and checks the epilogue's reads of it like
    any producer's; its `body` is a placeholder codegen never evaluates (the GEMM computes the
    value), and `reads()` names the extern's operands.
  - `matmul_candidates(steps, graph_outputs)`: per matrix-product extern of the schedule, the
    group that replaces it (with the first later kernel group reading the product as its
    epilogue when that is legal, else the product alone).
  - `apply_matmul_candidates(steps, chosen)` / `with_matmul_templates(sched, chosen)`: the step
    list (or the whole Schedule) with the chosen candidates in place of their steps.

Which candidates are worth it (timing on the GPU) is the caller's choice; every candidate here is
legal. The group's first member is the MatmulProduct (`is_matmul_group`), and codegen visits the
product tile by tile: its x index over a tile is the product's row-major linear index, which is
why an epilogue must visit the product in that order (rule (c) of `matmul_candidates`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sympy
import torch
from coil.lowering_ir import (
    Buffer,
    ComputedBuffer,
    ExternKernel,
    IndexValue,
    Pointwise,
    ReinterpretView,
    TensorRef,
)
from coil.memory_planner import peak_of_order
from coil.scheduler.canonical import LoopOrder, syms
from coil.scheduler.combo import ComboGroup
from coil.scheduler.group import FusionIllegal, KernelGroup, _same, plan
from coil.scheduler.ordering import OrderReport, planner_graph, profile, step_reads
from coil.scheduler.schedule import Schedule, Step, output_buffers

aten = torch.ops.aten

__all__ = [
    "MATMUL_DTYPES",
    "MATMUL_OPS",
    "MatmulCandidate",
    "MatmulProduct",
    "apply_matmul_candidates",
    "is_matmul_group",
    "matmul_candidates",
    "matmul_operands",
    "matmul_product",
    "with_matmul_templates",
]

# the extern kernels a template replaces, with the rank of their operands and product
MATMUL_OPS: dict[Any, int] = {aten.mm.default: 2, aten.addmm.default: 2, aten.bmm.default: 3,
                              aten.baddbmm.default: 3}
# product dtypes the template computes (fp32 accumulation; tl.dot takes these inputs)
MATMUL_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


@dataclass(frozen=True)
class MatmulOperands:
    """The operands of one matrix-product extern: `a` [B?, M, K], `b` [B?, K, N], the optional
    `bias` (addmm/baddbmm's `input`, broadcastable to the product), `alpha` and `beta` (1 and 0
    without a bias), the product buffer `out`, and the logical sizes (`batch` is 1 for mm/addmm)."""

    a: TensorRef
    b: TensorRef
    bias: TensorRef | None
    alpha: float | int
    beta: float | int
    out: ComputedBuffer
    batch: sympy.Expr
    m: sympy.Expr
    n: sympy.Expr
    k: sympy.Expr


def _scalar(x: Any) -> float | int | None:
    """A finite Python number (bool counts as int), or None (a symbolic scalar, a tensor, inf or
    NaN: the template writes alpha and beta into its text as literals)."""
    if isinstance(x, bool):
        return int(x)
    return x if isinstance(x, int | float) and math.isfinite(x) else None


def matmul_operands(ext: ExternKernel) -> MatmulOperands | None:
    """`ext`'s operands when a template can compute it, else None.

    The rule: `ext.kernel` is in MATMUL_OPS; `a` and `b` are 2-D (mm/addmm) or 3-D (bmm/baddbmm)
    tensors and the product a buffer of that rank, all of one dtype of MATMUL_DTYPES and on one
    device; addmm/baddbmm's input (the bias) has that dtype and device too and broadcasts to the
    product (sizes right-aligned, each equal or 1), and beta/alpha are Python numbers; no other
    keyword arguments, no mutation, no symbol bindings; no static size is 0 (an empty product is
    left to ATen).
    """
    rank = MATMUL_OPS.get(ext.kernel)
    if rank is None or ext.mutates or ext.bindings or not isinstance(ext.results, ComputedBuffer):
        return None
    if set(ext.kwargs) - {"alpha", "beta"}:
        return None
    with_bias = ext.kernel in (aten.addmm.default, aten.baddbmm.default)
    args = list(ext.args)
    if len(args) != (3 if with_bias else 2):
        return None
    bias = args.pop(0) if with_bias else None
    a, b = args
    alpha = _scalar(ext.kwargs.get("alpha", 1))
    beta = _scalar(ext.kwargs.get("beta", 1)) if with_bias else 0
    out = ext.results
    tensors = [t for t in (a, b, bias) if t is not None]
    if alpha is None or beta is None or not all(isinstance(t, Buffer | ReinterpretView) for t in tensors):
        return None
    lay = out.layout
    if lay.dtype not in MATMUL_DTYPES or any(t.layout.dtype != lay.dtype for t in tensors):
        return None
    if any(t.layout.device != lay.device for t in tensors):
        return None
    if len(a.layout.size) != rank or len(b.layout.size) != rank or len(lay.size) != rank:
        return None
    sizes = [sympy.sympify(s) for s in lay.size]
    if bias is not None:
        bsizes = [sympy.sympify(s) for s in bias.layout.size]
        if len(bsizes) > rank or not all(s == 1 or _same(s, t) for s, t in zip(reversed(bsizes), reversed(sizes),
                                                                                   strict=False)):
            return None
    k = sympy.sympify(a.layout.size[-1])
    if any(s == 0 for s in (*sizes, k)):
        return None
    batch = sizes[0] if rank == 3 else sympy.Integer(1)
    return MatmulOperands(a, b, bias, alpha, beta, out, batch, sizes[-2], sizes[-1], k)


@dataclass(eq=False)
class MatmulProduct(Pointwise):
    """A matrix-product extern as a kernel-group member (module docstring).

    `output` is the extern's result buffer, `ranges` its logical sizes ((M, N) or (B, M, N)),
    `store_index` its layout's index of the logical position p0.. . `body` is an IndexValue of
    the row-major linear position (`b*M*N + m*N + n`): codegen never evaluates it, but
    canonicalisation carries it through the loop mapping, so `row_major_in_group` can check
    exactly where the group visits each position. `reads()` names the storages of the
    extern's tensor arguments (a, b and the bias), so every consumer of `op.reads()` (ordering,
    wrapper plan, capture, memory plan, debug dump) sees the right dependencies.
    """

    extern: ExternKernel

    def reads(self) -> list[str]:
        return self.extern.reads()

    @staticmethod
    def of(ext: ExternKernel) -> MatmulProduct | None:
        """The member for `ext`, or None when `matmul_operands(ext)` is None."""
        ops = matmul_operands(ext)
        if ops is None:
            return None
        out = ops.out
        p = list(syms("p", len(out.layout.size)))
        sizes = [sympy.sympify(s) for s in out.layout.size]
        linear: sympy.Expr = sympy.Integer(0)
        for v, s in zip(p, sizes, strict=True):
            linear = linear * s + v
        return MatmulProduct(ext.name, ext.origins, out, tuple(sizes), IndexValue(sympy.expand(linear), torch.int64),
                             sympy.expand(out.layout.index(p)), ext)


def matmul_product(g: KernelGroup) -> MatmulProduct | None:
    """The MatmulProduct of a matmul group (its first member), or None for any other group."""
    if g.members and isinstance(g.members[0].op, MatmulProduct):
        return g.members[0].op
    return None


def is_matmul_group(g: KernelGroup) -> bool:
    """Whether `g` runs as a GEMM template (its first member is a MatmulProduct)."""
    return matmul_product(g) is not None


@dataclass
class MatmulCandidate:
    """A group replacing the extern at `extern_step` (and the epilogue KernelGroup at
    `epilogue_step`, None when it is the product alone); indices into the step list it was
    found in."""

    group: KernelGroup
    extern_step: int
    epilogue_step: int | None


def row_major_in_group(group: KernelGroup) -> bool:
    """Whether the group's x iteration visits its product member in the product's row-major
    order: the product's linear position `b*M*N + m*N + n`, mapped to the group's dims, is
    exactly the row-major linear index of those dims (dim i weighted by the product of the
    sizes after it). Exact (sympy), no sampling. What codegen's tile-to-x-index mapping needs."""
    pm = group.members[0]
    body = pm.nest.body
    if not isinstance(body, IndexValue) or group.r_dims:
        return False
    linear: sympy.Expr = sympy.Integer(0)
    for d, s in zip(group.x_dims, syms("x", len(group.x_dims)), strict=True):
        linear = linear * d + s
    return _same(pm.kernel_expr(body.index), sympy.expand(linear))


def _pure_pointwise(g: KernelGroup) -> bool:
    """A group of "x" Pointwise members only (no reduction, scan, scatter or product), over one
    iteration space (not a combo's)."""
    return not isinstance(g, ComboGroup) and all(m.kind == "x" and type(m.op) is Pointwise for m in g.members)


def _product_alone(pm: MatmulProduct, name: str) -> KernelGroup:
    """The group of the product alone, storing it (in logical order: one tile of the template is
    a block of rows and columns of the product, whatever its layout)."""
    return plan(name, [pm], {pm.output.name}, set(), {id(pm): "logical"})


def matmul_candidates(steps: Sequence[Step], graph_outputs: set[str]) -> list[MatmulCandidate]:
    """One candidate per matrix-product extern of `steps` that `matmul_operands` accepts.

    Args:
        steps: a schedule's steps, in order.
        graph_outputs: storage buffers the graph returns (`output_buffers(graph.outputs)`).

    Returns:
        In step order, for each such extern at step i, a MatmulCandidate whose group is named
        `f"{extern.name}_mm"`. Its epilogue is the first later KernelGroup step j that reads the
        product (whatever else reads it first), when:
          (a) that group is pure pointwise (no reduction or scan members, no scatter, no other
              product) and no earlier candidate took it;
          (b) `group.plan(name, [product, *its ops], outside_readers, graph_outputs, orders)`
              succeeds (the product in logical order, the epilogue's members in the orders they
              had): every member reading the product reads it where it was written, so it stays in
              registers;
          (c) the group visits the product in its row-major order (`row_major_in_group`);
          (d) no step between i and j reads the product (an extern or a scatter reading it
              there refuses the epilogue; later readers make the template store it too), and none
              between them mutates a buffer the extern reads (the product is computed at j now,
              and must read what it read at i).
        `outside_readers` are the buffers read by every step other than i and j, so the group's
        `stores` / `internal` are right. Otherwise the candidate is the product alone
        (`epilogue_step=None`), storing the product.
    """
    reads = [set(step_reads(st)) for st in steps]
    taken: set[int] = set()
    out: list[MatmulCandidate] = []
    for i, st in enumerate(steps):
        if not isinstance(st, ExternKernel):
            continue
        pm = MatmulProduct.of(st)
        if pm is None:
            continue
        name = f"{st.name}_mm"
        prod = pm.output.name
        j = next((k for k in range(i + 1, len(steps)) if isinstance(steps[k], KernelGroup) and prod in reads[k]), None)
        group = None
        if j is not None and j not in taken:
            group = _with_epilogue(pm, name, steps, reads, i, j, graph_outputs)
        if group is not None and j is not None:
            taken.add(j)
            out.append(MatmulCandidate(group, i, j))
        else:
            out.append(MatmulCandidate(_product_alone(pm, name), i, None))
    return out


def _with_epilogue(pm: MatmulProduct, name: str, steps: Sequence[Step], reads: list[set[str]], i: int, j: int,
                   graph_outputs: set[str]) -> KernelGroup | None:
    """The group of `pm` (the extern at step i) with the kernel group at step j as its epilogue,
    or None when rules (a)-(d) of `matmul_candidates` refuse it."""
    epi = steps[j]
    if not isinstance(epi, KernelGroup) or not _pure_pointwise(epi):
        return None
    prod = pm.output.name
    between = [steps[k] for k in range(i + 1, j)]
    if any(prod in reads[k] for k in range(i + 1, j)):
        return None  # read before the template would write it
    ext_reads = set(pm.reads())
    if any(isinstance(st, ExternKernel) and ext_reads & set(st.mutates) for st in between):
        return None  # an operand mutated in between: computed at j, the product would see the new value
    outside = set().union(*(reads[k] for k in range(len(steps)) if k not in (i, j)))
    orders: dict[int, LoopOrder] = {id(pm): "logical"}
    orders.update({id(m.op): m.order for m in epi.members})
    ops: list[Pointwise] = [pm, *(m.op for m in epi.members if isinstance(m.op, Pointwise))]
    try:
        group = plan(name, ops, outside, graph_outputs, orders)
    except FusionIllegal:
        return None
    return group if row_major_in_group(group) else None


def apply_matmul_candidates(steps: list[Step], chosen: Sequence[MatmulCandidate]) -> list[Step]:
    """`steps` with each chosen candidate's extern step and epilogue step removed and its group
    inserted at the epilogue's position (the extern's when it has none).

    The order stays valid: the group runs where its epilogue ran, after every step writing its
    inputs (the extern's operands were written before the extern; the epilogue's other inputs
    before the epilogue), and every other reader of the product comes after it
    (`matmul_candidates`, rule (d)). Raises ValueError when two candidates claim one step or a
    candidate's steps are not an extern and a kernel group of `steps`.
    """
    at: dict[int, KernelGroup] = {}
    claimed: set[int] = set()
    drop: set[int] = set()
    for c in chosen:
        own = {c.extern_step} if c.epilogue_step is None else {c.extern_step, c.epilogue_step}
        if own & claimed:
            raise ValueError(f"{c.group.name}: steps {sorted(own & claimed)} are claimed by another candidate")
        claimed |= own
        if not isinstance(steps[c.extern_step], ExternKernel):
            raise ValueError(f"{c.group.name}: step {c.extern_step} is not an extern")
        if c.epilogue_step is None:
            at[c.extern_step] = c.group
            continue
        if not isinstance(steps[c.epilogue_step], KernelGroup):
            raise ValueError(f"{c.group.name}: step {c.epilogue_step} is not a kernel group")
        drop.add(c.extern_step)
        at[c.epilogue_step] = c.group
    return [at.get(k, st) for k, st in enumerate(steps) if k not in drop]


def with_matmul_templates(sched: Schedule, chosen: Sequence[MatmulCandidate]) -> Schedule:
    """`sched` with `chosen` applied (`apply_matmul_candidates`), as a new Schedule.

    Its `log` is `sched`'s; its `order` report (when `sched` has one) keeps the baseline peak of
    the fused order and gives the planner-model peak of the new steps (their own order), with
    "+ matmul templates" added to the method."""
    steps = apply_matmul_candidates(list(sched.steps), chosen)
    order = sched.order
    if order is not None and chosen:
        pg = planner_graph(steps, sched.graph, output_buffers(sched.graph.outputs))
        if pg is None:
            order = OrderReport(order.baseline_peak, order.peak, f"{order.method} + matmul templates", order.inputs)
        else:
            order = OrderReport(order.baseline_peak, peak_of_order(pg, range(len(steps))),
                                f"{order.method} + matmul templates", order.inputs, *profile(pg, range(len(steps))))
    return Schedule(sched.graph, steps, sched.log, order)
