"""Combo kernels: the parts of a `coil.scheduler.ComboGroup` in one launch.

Each part is generated as the kernel it would be alone (pointwise, or a small reduction), with
its launch configuration, as a `@triton.jit` function that takes its program's index `pid` as
an argument instead of reading it; the combo kernel reads its program's index once and calls
the part whose range of programs holds it, with the index counted from that range's start:

    pid = tl.program_id(0)
    if pid < G0:
        part0(a0, a1, 4096, pid, XBLOCK=1024)
    elif pid < G0 + G1:
        part1(a2, a3, 384, 98, pid - G0, XBLOCK=1, RBLOCK=128)

Every size is static (the scheduler combines only such parts), so each part's element counts
are literals and the grid is the sum of the parts' grids. The kernel takes the parts' buffers,
each once, in the order of first use; it runs with the most warps any part asks for. Combos
are not autotuned (`strategy` "combo"): the reductions among the parts are small by
construction, and one configuration serves every part.
"""

from __future__ import annotations

import sympy
from coil.lowering_ir import Buffer
from coil.scheduler import ComboGroup
from coil.triton_codegen.config import CodegenOptions
from coil.triton_codegen.frame import PROGRAM_ID
from coil.triton_codegen.kernel_source import KernelSource


def generate_combo(group: ComboGroup, buffers: dict[str, Buffer], target: str, strategy: str = "auto",
                   hints: dict[sympy.Symbol, int] | None = None, options: CodegenOptions | None = None) -> KernelSource:
    """The kernel of `group`'s parts (see the module docstring); the text without imports, as
    `KernelWriter.generate` gives it. `strategy` is that of every reduction among the parts (as
    for `generate`). ValueError for a part with a run-time size."""
    from coil.triton_codegen.kernel import KernelWriter, kernel_config  # kernel.py dispatches here

    texts: list[str] = []
    args: dict[str, str] = {}  # buffer -> the combo's argument
    calls: list[tuple[int, str]] = []  # (programs, call)
    warps = 1
    debug = False
    plain = True
    for part in group.parts:
        cfg = kernel_config(part, target, strategy, hints)
        writer = KernelWriter(part, buffers, target, cfg, options)
        writer.program_id = "pid"
        ks = writer.generate()
        sizes = [sympy.sympify(e) for e in (ks.grid, *ks.size_args)]
        if not all(e.is_Integer for e in sizes):
            raise ValueError(f"combo {group.name}: part {part.name} has run-time sizes {ks.size_args}")
        texts.append(ks.source)
        names = [args.setdefault(b, f"a{len(args)}") for b in ks.pointer_args]
        consts = [f"{k}={v}" for k, v in ks.constexprs.items()]
        call = ", ".join([*names, *(str(int(e)) for e in sizes[1:]), "{pid}", *consts])
        calls.append((int(sizes[0]), f"{ks.name}({call})"))
        warps = max(warps, ks.num_warps)
        debug |= ks.debug
        plain &= ks.plain_loads
    lines = [
        f"# kernel {group.name}: combo of {len(calls)} kernels; fused FX nodes: {', '.join(group.origins())}",
        "@triton.jit",
        f"def {group.name}({', '.join(args.values())}):",
        f"    pid = {PROGRAM_ID}",
    ]
    start = 0
    for i, (programs, call) in enumerate(calls):
        end = start + programs
        if i < len(calls) - 1:
            lines.append(f"    {'if' if i == 0 else 'elif'} pid < {end}:")
        else:
            lines.append("    else:")
        lines.append("        " + call.format(pid=f"pid - {start}" if start else "pid"))
        start = end
    source = "\n".join(texts) + "\n\n" + "\n".join(lines) + "\n"
    return KernelSource(
        group.name, source, tuple(args), (), {}, sympy.Integer(start), warps, "combo",
        tuple(group.origins()), tuple(group.stores), debug, plain,
    )
