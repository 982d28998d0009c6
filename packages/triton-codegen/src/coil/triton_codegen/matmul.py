"""The GEMM template: one Triton kernel computing a matrix product tile by tile, with the pointwise
epilogue of its kernel group applied to the tile before anything is stored.

A matmul group (coil.scheduler's `is_matmul_group`) has a `MatmulProduct` first (the mm, addmm,
bmm or baddbmm an extern would run) and then the pointwise members of its epilogue. The kernel:

    pid -> (batch, tile row, tile column)   1-D grid, GROUP_M rows of tiles swept column by column
    offs_m, offs_n, offs_k                  the tile's rows, columns, and K lanes
    acc = sum over K steps of dot(A tile, B tile)     fp32 accumulation; masks along K only
    product = alpha * acc + beta * bias     (addmm/baddbmm), rounded to the product's dtype
    xindex = b*M*N + offs_m*N + offs_n      the group's x index over the tile; xmask the tile's
                                            lanes inside the product; x dims by div/mod
    epilogue members, stores                as in a pointwise kernel (KernelWriter machinery)

Rows and columns past the product's edge read row/column `i % M` / `j % N` of A and B (always in
range, so those loads need no mask) and are never stored (xmask). Any strides work: each
operand's are read from its layout (an nn.Linear weight `w.t()` is a stride-(1, K) view).

The product is bound, rounded to its buffer's dtype (exactly as if it had been stored and
loaded: the unfused path's epilogue reads it rounded), as the product buffer's value in the
scope's `members`, so the epilogue's loads of it read the registers. It is stored only when the
group stores it (`group.stores`). The scheduler guarantees the group visits the product in
row-major order (`coil.scheduler.matmul.row_major_in_group`), which is what makes `xindex`
above the group's own x index.

Precision: float32 products use `input_precision="ieee"` (no TF32), as eager fp32 matmuls with
torch's default `allow_tf32=False`; 16-bit inputs multiply in the tensor cores' native precision.
On the interpreter 16-bit tiles are converted to float32 first (exact), since its `tl.dot` does
not handle bfloat16.
"""

from __future__ import annotations

import dataclasses

import sympy
import torch
from coil.lowering_ir import Buffer, Expr, TensorRef
from coil.scheduler import KernelGroup, matmul_operands, matmul_product
from coil.scheduler.matmul import MatmulOperands
from coil.triton_codegen.casts import HALF, round_to_half
from coil.triton_codegen.config import CodegenOptions, KernelConfig
from coil.triton_codegen.indirect import IndirectReads
from coil.triton_codegen.kernel_source import KernelSource, MatmulShape
from coil.triton_codegen.matmul_config import MatmulConfig, matmul_grid, shape_configs
from coil.triton_codegen.memory import MemoryWriter
from coil.triton_codegen.prelude import module

__all__ = ["MatmulWriter", "generate_matmul"]


class MatmulWriter(MemoryWriter):
    """Writes one GEMM template kernel (module docstring). Use `generate_matmul`."""

    def __init__(self, group: KernelGroup, buffers: dict[str, Buffer], target: str, cfg: MatmulConfig,
                 options: CodegenOptions | None = None, indirect: IndirectReads | None = None) -> None:
        super().__init__(group, buffers, target, KernelConfig("matmul", 1, 1, cfg.num_warps), options, False, indirect)
        pm = matmul_product(group)
        ops = matmul_operands(pm.extern) if pm is not None else None
        if pm is None or ops is None:
            raise ValueError(f"{group.name} is not a matmul group")
        self.ops: MatmulOperands = ops
        self.mcfg = cfg
        self.static = {}  # M, N, K are assigned in the body (`sizes`), xnumel is not used
        self.batched = ops.batch != 1

    def generate(self) -> KernelSource:
        """The kernel's source (the `def` and its body, no imports) and launch facts."""
        self.sizes()
        self.tile()
        acc = self.accumulate()
        value = self.product(acc)
        self.epilogue(value)
        return self.finish()

    def sizes(self) -> None:
        """M, N, K (and the batch) as local names: static sizes as literals, so Triton sees the
        trip count of the loop over K and which masks the blocks make unnecessary."""
        o = self.ops
        for name, e in (("M", o.m), ("N", o.n), ("K", o.k)):
            self.emit(self.xscope, f"{name} = {self.ix(sympy.sympify(e))}")

    def tile(self) -> None:
        """The program's batch and tile (GROUP_M swizzle), its rows, columns and K lanes."""
        xs = self.xscope
        idx_t = ".to(tl.int64)" if self.int64 else ""
        self.emit(xs, f"pid = tl.program_id(0){idx_t}")
        self.emit(xs, "tiles_m = tl.cdiv(M, BLOCK_M)")
        self.emit(xs, "tiles_n = tl.cdiv(N, BLOCK_N)")
        if self.batched:
            self.emit(xs, "bid = pid // (tiles_m * tiles_n)")
            self.emit(xs, "pid = pid % (tiles_m * tiles_n)")
        # bands of GROUP_M tile rows, each swept column by column: the programs running at once
        # share rows of A and columns of B, which then come from L2
        self.emit(xs, "band = GROUP_M * tiles_n")
        self.emit(xs, "first_m = (pid // band) * GROUP_M")
        self.emit(xs, "rows = tl.minimum(tiles_m - first_m, GROUP_M)")
        self.emit(xs, "pid_m = first_m + (pid % band) % rows")
        self.emit(xs, "pid_n = (pid % band) // rows")
        self.emit(xs, "offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)")
        self.emit(xs, "offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)")
        self.emit(xs, "offs_k = tl.arange(0, BLOCK_K)")
        # rows/columns past the edge wrap (read in range, never stored); none when the block
        # divides a static size (the constexpr `if` keeps offsets visibly contiguous)
        for dim, offs, wrapped, block in (("M", "offs_m", "am", "BLOCK_M"), ("N", "offs_n", "bn", "BLOCK_N")):
            size = self.ops.m if dim == "M" else self.ops.n
            if sympy.sympify(size).is_Integer:
                self.emit(xs, f"if {dim} % {block} == 0:")
                self.emit(xs, f"    {wrapped} = {offs}")
                self.emit(xs, "else:")
                self.emit(xs, f"    {wrapped} = {offs} % {dim}")
            else:
                self.emit(xs, f"{wrapped} = {offs} % {dim}")

    def base(self, ref: TensorRef, batch_dim: bool) -> str:
        """Pointer to the program's matrix of `ref` (its layout's offset, plus the batch stride
        times the batch index for a batched operand)."""
        lay = ref.layout
        parts = [self.ptr(ref.storage.name)]
        if sympy.sympify(lay.offset) != 0:
            parts.append(f"({self.ix(sympy.sympify(lay.offset))})")
        if batch_dim and self.batched and sympy.sympify(lay.stride[0]) != 0:
            parts.append(f"bid * ({self.ix(sympy.sympify(lay.stride[0]))})")
        return " + ".join(parts)

    def stride(self, ref: TensorRef, dim: int) -> str:
        """The stride of `ref`'s dim `dim` (counted from the end when negative) as kernel text."""
        return f"({self.ix(sympy.sympify(ref.layout.stride[dim]))})"

    def accumulate(self) -> str:
        """The loop over K: A [BLOCK_M, BLOCK_K] and B [BLOCK_K, BLOCK_N] tiles (masked along K
        only, and not at all when BLOCK_K divides a static K), fp32 dot products into `acc`."""
        xs = self.xscope
        a, b = self.ops.a, self.ops.b
        self.emit(xs, f"a_ptrs = {self.base(a, True)} + am[:, None] * {self.stride(a, -2)} "
                      f"+ offs_k[None, :] * {self.stride(a, -1)}")
        self.emit(xs, f"b_ptrs = {self.base(b, True)} + offs_k[:, None] * {self.stride(b, -2)} "
                      f"+ bn[None, :] * {self.stride(b, -1)}")
        self.emit(xs, "acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)")
        bound = "K" if self.target == "cuda" else "_coil_index(K)"
        self.emit(xs, f"for k0 in range(0, {bound}, BLOCK_K):")
        inner = "        "
        masked = ["a_tile = tl.load(a_ptrs, mask=offs_k[None, :] < K - k0, other=0.0)",
                  "b_tile = tl.load(b_ptrs, mask=offs_k[:, None] < K - k0, other=0.0)"]
        if sympy.sympify(self.ops.k).is_Integer:
            self.lines += ["        if K % BLOCK_K == 0:", "            a_tile = tl.load(a_ptrs)",
                           "            b_tile = tl.load(b_ptrs)", "        else:"]
            self.lines += [inner + "    " + ln for ln in masked]
        else:
            self.lines += [inner + ln for ln in masked]
        half = self.ops.out.layout.dtype in HALF
        if half and self.target == "cuda":
            self.lines.append(inner + "acc = tl.dot(a_tile, b_tile, acc)")
        elif half:  # the interpreter's tl.dot does not take bfloat16: float32 is exact for both
            self.lines.append(inner + "acc = tl.dot(a_tile.to(tl.float32), b_tile.to(tl.float32), acc, "
                                      "input_precision=\"ieee\")")
        else:
            self.lines.append(inner + "acc = tl.dot(a_tile, b_tile, acc, input_precision=\"ieee\")")
        self.lines.append(inner + f"a_ptrs += BLOCK_K * {self.stride(a, -1)}")
        self.lines.append(inner + f"b_ptrs += BLOCK_K * {self.stride(b, -2)}")
        return "acc"

    def product(self, acc: str) -> str:
        """`alpha * acc + beta * bias` (addmm/baddbmm; beta 0 reads no bias, as eager ignores
        the input then), rounded to the product buffer's dtype: the value the epilogue reads."""
        xs = self.xscope
        o = self.ops
        value = acc if o.alpha == 1 else f"({acc} * {float(o.alpha)!r})"
        if o.bias is not None and o.beta != 0:
            bias = self.tmp()
            self.emit(xs, f"{bias} = tl.load({self.bias_pointer(o.bias)}).to(tl.float32)")
            term = bias if o.beta == 1 else f"({bias} * {float(o.beta)!r})"
            value = f"{value} + {term}"
        t = self.tmp()
        dt = o.out.layout.dtype
        code = round_to_half(f"({value})", torch.float32, dt, self.target) if dt in HALF else value
        self.emit(xs, f"{t} = {code}")
        return t

    def bias_pointer(self, bias: TensorRef) -> str:
        """Pointers to the bias at the tile's positions: its sizes right-aligned to the product's
        (B, M, N), a dim of size 1 (or missing) broadcast, so the pointers' shape is [BLOCK_M, 1],
        [1, BLOCK_N], both or a scalar, and adding them to the tile broadcasts. Rows and columns
        use the wrapped offsets, so every lane reads inside the bias (no mask)."""
        lay = bias.layout
        names = ["bid", "am[:, None]", "bn[None, :]"]
        parts = [self.base(bias, False)]
        for size, stride, name in zip(reversed(lay.size), reversed(lay.stride), reversed(names), strict=False):
            if sympy.sympify(size) == 1 or sympy.sympify(stride) == 0 or (name == "bid" and not self.batched):
                continue
            parts.append(f"{name} * ({self.ix(sympy.sympify(stride))})")
        return " + ".join(parts)

    def epilogue(self, value: str) -> None:
        """The group's x frame over the tile, then its members in order: the product's value
        bound to its buffer (stored when the group stores it), the others computed and stored as
        in a pointwise kernel."""
        xs = self.xscope
        g = self.g
        batch = "bid * (M * N) + " if self.batched else ""
        static = sympy.sympify(self.ops.m).is_Integer and sympy.sympify(self.ops.n).is_Integer
        compare = "xmask = (offs_m[:, None] < M) & (offs_n[None, :] < N)"
        if static:  # all true when the blocks divide M and N: the stores lose their predicate
            self.emit(xs, "if M % BLOCK_M == 0 and N % BLOCK_N == 0:")
            self.emit(xs, "    xmask = tl.full([BLOCK_M, BLOCK_N], 1, tl.int1)")
            self.emit(xs, "else:")
            self.emit(xs, f"    {compare}")
        else:
            self.emit(xs, compare)
        self.emit(xs, f"xindex = {batch}offs_m[:, None] * N + offs_n[None, :]")
        self._dims(xs, "x", "xindex", g.x_dims)
        first = g.members[0]
        xs.members[first.op.output.name] = value
        self.store(first, value, xs)
        for m in g.members[1:]:
            self.store(m, self.compute_member(m, xs), xs)

    def finish(self) -> KernelSource:
        """The signature over the body written so far, and the launch facts."""
        g, o, cfg = self.g, self.ops, self.mcfg
        syms, pointer_args = self.signature_facts((g.xnumel, o.k, o.batch))
        args = [*self.ptrs.values(), "xnumel", "rnumel", *(s.name for s in syms),
                *(f"{c}: tl.constexpr" for c in cfg.constexprs)]
        head = [f"# kernel {g.name}: matmul template; fused FX nodes: {', '.join(g.origins())}",
                "@triton.jit", f"def {self.name}({', '.join(args)}):"]
        if self.indirect is not None:
            head += self.indirect.table_loads(self.ptrs)
        source = "\n".join([*head, *self.lines]) + "\n"
        shape = MatmulShape(o.batch, o.m, o.n, o.k, o.out.layout.dtype)
        size_args: tuple[Expr, ...] = (g.xnumel, o.k, *syms)
        return KernelSource(self.name, source, pointer_args, size_args, cfg.constexprs, matmul_grid(shape, cfg),
                            cfg.num_warps, "matmul", tuple(g.origins()), tuple(g.stores), self.asserts > 0,
                            self.plain_loads, False, cfg.num_stages, shape)


def generate_matmul(group: KernelGroup, buffers: dict[str, Buffer], target: str,
                    hints: dict[sympy.Symbol, int] | None = None, options: CodegenOptions | None = None,
                    indirect: IndirectReads | None = None, config: MatmulConfig | None = None) -> KernelSource:
    """The GEMM template module for matmul group `group` (module docstring), launched with
    `config` (default: the first of `matmul_configs`, at the size hints `hints`).

    `size_args` are (xnumel, K, size symbols...): K is the reduction length (the autotuner widens
    its tolerance by it). `strategy` is "matmul", `matmul` the product's shape; `indirect` as
    for `generate`. ValueError for a group that is not a matmul group."""
    pm = matmul_product(group)
    ops = matmul_operands(pm.extern) if pm is not None else None
    if ops is None:
        raise ValueError(f"{group.name} is not a matmul group")
    cfg = config or shape_configs(MatmulShape(ops.batch, ops.m, ops.n, ops.k, ops.out.layout.dtype), target, hints)[0]
    ks = MatmulWriter(group, buffers, target, cfg, options, indirect).generate()
    return dataclasses.replace(ks, source=module(ks.source, target))
