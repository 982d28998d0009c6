"""Random valid tensor programs: a tiny typed DSL, its interpreter, and a hypothesis strategy.

A `Program` is a list of inputs (logical shape, dtype, memory layout) and a list of `Op`s in SSA
form: value `i` is input `i` for `i < len(inputs)`, else the result of op `i - len(inputs)`.
`Program.function()` interprets it into a plain Python function of torch calls (what
`torch.compile` traces); `Program.source()` prints it as a runnable Python reproducer.

Split mode (`Program.split_min`, drawn with weight 1/4): one dim of the shapes is long
(24-300) and coil's split-reduction threshold (COIL_SPLIT_REDUCTION_MIN, lowering-ir) is set to
`split_min` while the program compiles, so reductions along that dim take coil's
partials-then-final path, which small shapes at the default threshold never reach.

Dynamic mode (`Program.dynamic`, only when asked: `programs(dynamic=True)`): the program is
compiled with `dynamic=True`, so every size is a symbol in coil's kernels and wrapper (symbolic
index printing, float scalars made of sizes such as `1 / numel`).

The strategy builds programs step by step on *real* (small, seeded) tensors, so every op it keeps
is valid in eager, and it rejects steps whose results would be fragile to compare: infinities,
NaNs (except a mean over an empty dim), comparisons or float-to-int casts whose operands sit
within rounding distance of the decision boundary, and magnitudes where float16 loses precision.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from hypothesis import strategies as st

DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "int32": torch.int32,
    "int64": torch.int64,
    "bool": torch.bool,
}
_NAME = {v: k for k, v in DTYPES.items()}
LAYOUTS = ("contiguous", "transposed", "sliced", "expanded", "offset")

UNARY = ("exp", "tanh", "sigmoid", "relu", "abs", "neg", "floor", "ceil", "round", "trunc", "sign", "sqrt_abs")
ROUNDING = ("floor", "ceil", "round", "trunc", "sign")  # steps: compared only away from them
BINARY = ("add", "mul", "sub", "div", "maximum", "minimum")
INT_BINARY = ("floor_divide", "remainder", "fmod", "bitwise_and", "bitwise_or", "bitwise_xor")  # integers
SCALAR = ("add_s", "mul_s", "pow_s", "clamp_s")
CMPS = {"lt": "<", "gt": ">", "le": "<=", "ge": ">=", "eq": "==", "ne": "!="}
REDUCTIONS = ("sum", "amax", "amin", "prod", "mean", "var", "std", "argmax", "argmin",  # var/std: correction 1
              "any", "all", "logsumexp")
ARG_REDUCTIONS = ("argmax", "argmin")  # first index among ties, as eager
DIMWISE = ("cumsum", "cumprod", "softmax", "log_softmax")  # same shape out, along one dim
VIEWS = ("permute", "transpose", "reshape", "unsqueeze", "squeeze", "slice", "expand", "contiguous")

# Largest |value| kept per dtype (float16 is compared at 1e-2; keep it where that is meaningful).
_MAX_ABS = {torch.float32: 1e4, torch.float16: 64.0, torch.int32: 1e6, torch.int64: 1e9, torch.bool: 1}


# ----------------------------------------------------------------------------------------- DSL


@dataclass(frozen=True)
class Input:
    shape: tuple[int, ...]
    dtype: str
    layout: str = "contiguous"  # one of LAYOUTS
    dim: int = 0  # the dim the layout acts on (sliced / expanded / transposed with dim+1)

    def describe(self) -> str:
        return f"{self.dtype}{list(self.shape)} {self.layout}" + (
            f"(dim={self.dim})" if self.layout != "contiguous" else ""
        )


@dataclass(frozen=True)
class Op:
    name: str
    srcs: tuple[int, ...]
    params: tuple[object, ...] = ()


def _ref(i: int, n_inputs: int) -> str:
    return f"x{i}" if i < n_inputs else f"v{i - n_inputs}"


def render(op: Op, names: Sequence[str]) -> str:
    """One op as a Python expression over the names of its sources."""
    a = [names[s] for s in op.srcs]
    p = op.params
    n = op.name
    if n == "sqrt_abs":
        return f"torch.sqrt(torch.abs({a[0]}))"
    if n in UNARY:
        return f"torch.{n}({a[0]})"
    if n == "div":
        return f"{a[0]} / ({a[1]}.abs() + 1)"
    if n in ("add", "mul", "sub", "maximum", "minimum") or n in INT_BINARY:
        return f"torch.{n}({a[0]}, {a[1]})"
    if n == "add_s":
        return f"{a[0]} + {p[0]!r}"
    if n == "mul_s":
        return f"{a[0]} * {p[0]!r}"
    if n == "pow_s":
        return f"{a[0]} ** {p[0]!r}"
    if n == "clamp_s":
        return f"torch.clamp({a[0]}, min={p[0]!r}, max={p[1]!r})"
    if n == "index_select":
        return f"{a[0]}.index_select({p[0]}, torch.tensor({list(p[1:])!r}, dtype=torch.int64, device={a[0]}.device))"
    if n == "where":
        return f"torch.where({a[0]} {CMPS[str(p[0])]} {a[1]}, {a[2]}, {a[3]})"
    if n == "where_b":
        return f"torch.where({a[0]}, {a[1]}, {a[2]})"
    if n == "cast":
        return f"{a[0]}.to(torch.{p[0]})"
    if n in REDUCTIONS:
        return f"torch.{n}({a[0]}, dim={p[0]}, keepdim={p[1]})"
    if n in DIMWISE:
        return f"torch.{n}({a[0]}, dim={p[0]})"
    if n == "permute":
        return f"{a[0]}.permute{tuple(p)!r}"
    if n == "transpose":
        return f"{a[0]}.transpose({p[0]}, {p[1]})"
    if n == "reshape":
        return f"{a[0]}.reshape{tuple(p)!r}"
    if n == "unsqueeze":
        return f"{a[0]}.unsqueeze({p[0]})"
    if n == "squeeze":
        return f"{a[0]}.squeeze({p[0]})"
    if n == "slice":
        dim, start, stop, step = p
        idx = ", ".join([":"] * int(dim) + [f"{start}:{stop}:{step}"])  # type: ignore[call-overload]
        return f"{a[0]}[{idx}]"
    if n == "expand":
        return f"{a[0]}.expand{tuple(p)!r}"
    if n == "contiguous":
        return f"{a[0]}.contiguous()"
    if n == "cat":
        return f"torch.cat([{a[0]}, {a[1]}], dim={p[0]})"
    if n == "flip":
        return f"torch.flip({a[0]}, dims={tuple(p)!r})"
    raise ValueError(f"unknown op {n}")


def apply(op: Op, args: Sequence[torch.Tensor]) -> torch.Tensor:
    """The interpreter: run one op on tensors (the same semantics as `render`)."""
    a, p, n = args, op.params, op.name
    if n == "sqrt_abs":
        return torch.sqrt(torch.abs(a[0]))
    if n in UNARY:
        return getattr(torch, n)(a[0])
    if n == "div":
        return a[0] / (a[1].abs() + 1)
    if n in ("add", "mul", "sub", "maximum", "minimum") or n in INT_BINARY:
        return getattr(torch, n)(a[0], a[1])
    if n == "add_s":
        return a[0] + p[0]
    if n == "mul_s":
        return a[0] * p[0]
    if n == "pow_s":
        return a[0] ** p[0]
    if n == "clamp_s":
        return torch.clamp(a[0], min=p[0], max=p[1])  # type: ignore[arg-type]
    if n == "index_select":
        return a[0].index_select(p[0], torch.tensor(list(p[1:]), dtype=torch.int64, device=a[0].device))  # type: ignore[arg-type]
    if n == "where":
        c = {
            "lt": torch.lt, "gt": torch.gt, "le": torch.le,
            "ge": torch.ge, "eq": torch.eq, "ne": torch.ne,
        }[str(p[0])](a[0], a[1])
        return torch.where(c, a[2], a[3])
    if n == "where_b":
        return torch.where(a[0], a[1], a[2])
    if n == "cast":
        return a[0].to(DTYPES[str(p[0])])
    if n in REDUCTIONS:
        return getattr(torch, n)(a[0], dim=p[0], keepdim=p[1])
    if n in DIMWISE:
        return getattr(torch, n)(a[0], dim=p[0])
    if n == "permute":
        return a[0].permute(*p)
    if n == "transpose":
        return a[0].transpose(p[0], p[1])  # type: ignore[arg-type]
    if n == "reshape":
        return a[0].reshape(*p)
    if n == "unsqueeze":
        return a[0].unsqueeze(p[0])  # type: ignore[arg-type]
    if n == "squeeze":
        return a[0].squeeze(p[0])  # type: ignore[arg-type]
    if n == "slice":
        dim, start, stop, step = p
        return a[0][(slice(None),) * int(dim) + (slice(start, stop, step),)]  # type: ignore[call-overload]
    if n == "expand":
        return a[0].expand(*p)
    if n == "contiguous":
        return a[0].contiguous()
    if n == "cat":
        return torch.cat([a[0], a[1]], dim=p[0])  # type: ignore[arg-type]
    if n == "flip":
        return torch.flip(a[0], dims=p)  # type: ignore[arg-type]
    raise ValueError(f"unknown op {n}")


@dataclass
class Program:
    inputs: list[Input]
    ops: list[Op]
    outputs: list[int]
    seed: int = 0
    notes: list[str] = field(default_factory=list)
    split_min: int | None = None  # the knob split_reduction_min while compiling (split mode), or default
    dynamic: bool = False  # compiled with dynamic=True (dynamic mode)

    # --- interpretation -------------------------------------------------------------------
    def function(self) -> Callable[..., tuple[torch.Tensor, ...]]:
        ops, outputs, n_in = list(self.ops), list(self.outputs), len(self.inputs)

        def program(*xs: torch.Tensor) -> tuple[torch.Tensor, ...]:
            vals = list(xs)
            for op in ops:
                vals.append(apply(op, [vals[s] for s in op.srcs]))
            return tuple(vals[o] for o in outputs)

        program.__name__ = f"fuzz_program_{n_in}in_{len(ops)}ops"
        return program

    def make_inputs(self, device: str | torch.device = "cpu") -> list[torch.Tensor]:
        g = torch.Generator().manual_seed(self.seed)
        return [_make_input(spec, g).to(device) if str(device) != "cpu" else _make_input(spec, g)
                for spec in self.inputs]

    # --- printing -------------------------------------------------------------------------
    def source(self) -> str:
        n_in = len(self.inputs)
        names = [_ref(i, n_in) for i in range(n_in + len(self.ops))]
        lines = ["import torch"] + (["from coil.knobs import knobs"] if self.split_min is not None else []) + ["", ""]
        lines.append(f"def fn({', '.join(names[:n_in])}):")
        for i, op in enumerate(self.ops):
            lines.append(f"    {names[n_in + i]} = {render(op, names)}")
        outs = ", ".join(names[o] for o in self.outputs)
        lines.append(f"    return ({outs},)")
        lines.append("")
        lines.append("")
        lines.append(f"g = torch.Generator().manual_seed({self.seed})")
        for i, spec in enumerate(self.inputs):
            lines.append(f"x{i} = {_input_source(spec)}  # {spec.describe()}")
        lines.append("")
        dyn = ", dynamic=True" if self.dynamic else ""
        call = f'out = torch.compile(fn, backend="coil"{dyn})(' + ", ".join(names[:n_in]) + ")"
        if self.split_min is not None:
            lines.append(f"with knobs.override(split_reduction_min={self.split_min}):  # split mode")
            call = "    " + call
        lines.append(call)
        lines.append("ref = fn(" + ", ".join(names[:n_in]) + ")")
        lines.append("torch.testing.assert_close(out, ref, equal_nan=True)")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.source()

    # --- reduction helpers ----------------------------------------------------------------
    def live(self) -> Program:
        """Drop ops no output depends on (renumbering values)."""
        n_in = len(self.inputs)
        need: set[int] = set(self.outputs)
        for i in range(len(self.ops) - 1, -1, -1):
            if n_in + i in need:
                need.update(self.ops[i].srcs)
        remap = {i: i for i in range(n_in)}
        ops: list[Op] = []
        for i, op in enumerate(self.ops):
            if n_in + i in need:
                remap[n_in + i] = n_in + len(ops)
                ops.append(Op(op.name, tuple(remap[s] for s in op.srcs), op.params))
        return Program(list(self.inputs), ops, [remap[o] for o in self.outputs], self.seed,
                       split_min=self.split_min, dynamic=self.dynamic)


def _rand_logical(spec: Input, g: torch.Generator) -> torch.Tensor:
    dt = DTYPES[spec.dtype]
    if dt.is_floating_point:
        return (torch.rand(spec.shape, generator=g) * 4 - 2).to(dt)
    if dt == torch.bool:
        return torch.randint(0, 2, spec.shape, generator=g).bool()
    return torch.randint(-4, 5, spec.shape, generator=g, dtype=dt)


def _make_input(spec: Input, g: torch.Generator) -> torch.Tensor:
    """The logical values, placed in the requested (possibly non-contiguous) layout."""
    shape, d = list(spec.shape), spec.dim
    if spec.layout == "contiguous" or not shape:
        return _rand_logical(spec, g)
    if spec.layout == "transposed":  # dims d, d+1 swapped in memory
        phys = list(shape)
        phys[d], phys[d + 1] = phys[d + 1], phys[d]
        base = _rand_logical(Input(tuple(phys), spec.dtype), g)
        return base.transpose(d, d + 1)
    if spec.layout == "sliced":  # every other element along d, starting at 1
        phys = list(shape)
        phys[d] = 2 * shape[d] + 1
        base = _rand_logical(Input(tuple(phys), spec.dtype), g)
        return base[(slice(None),) * d + (slice(1, None, 2),)]
    if spec.layout == "expanded":  # size 1 in memory along d, stride 0
        phys = list(shape)
        phys[d] = 1
        base = _rand_logical(Input(tuple(phys), spec.dtype), g)
        return base.expand(*shape)
    if spec.layout == "offset":  # a non-zero storage offset
        flat = _rand_logical(Input((math.prod(shape) + 3,), spec.dtype), g)
        return flat[3:].view(*shape)
    raise ValueError(spec.layout)


def _input_source(spec: Input) -> str:
    """`_make_input` as source (same generator calls, so the same values)."""
    shape, d = list(spec.shape), spec.dim
    dt = DTYPES[spec.dtype]

    def rand(s: Sequence[int]) -> str:
        s = tuple(s)
        if dt.is_floating_point:
            return f"(torch.rand({s}, generator=g) * 4 - 2).to(torch.{spec.dtype})"
        if dt == torch.bool:
            return f"torch.randint(0, 2, {s}, generator=g).bool()"
        return f"torch.randint(-4, 5, {s}, generator=g, dtype=torch.{spec.dtype})"

    if spec.layout == "contiguous" or not shape:
        return rand(shape)
    if spec.layout == "transposed":
        phys = list(shape)
        phys[d], phys[d + 1] = phys[d + 1], phys[d]
        return f"{rand(phys)}.transpose({d}, {d + 1})"
    if spec.layout == "sliced":
        phys = list(shape)
        phys[d] = 2 * shape[d] + 1
        return f"{rand(phys)}[{', '.join([':'] * d + ['1::2'])}]"
    if spec.layout == "expanded":
        phys = list(shape)
        phys[d] = 1
        return f"{rand(phys)}.expand({', '.join(map(str, shape))})"
    if spec.layout == "offset":
        return f"{rand([math.prod(shape) + 3])}[3:].view({', '.join(map(str, shape))})"
    raise ValueError(spec.layout)


# ----------------------------------------------------------------------------------- checking


def _margin(t: torch.Tensor, low: bool = False) -> torch.Tensor:
    """How far apart two computations of `t` may plausibly drift (fusion keeps fp32 in regs).

    `low`: float16 took part upstream, so even a float32 value carries only float16 precision.
    """
    rel = 5e-2 if low or t.dtype == torch.float16 else 1e-3
    return rel * t.abs().to(torch.float32).clamp(min=1.0)


def _robust(
    op: Op, args: Sequence[torch.Tensor], exact: Sequence[bool], out: torch.Tensor, low: bool = False
) -> bool:
    """Reject ops whose eager result is too close to a discontinuity to compare reliably."""
    if op.name in ("softmax", "log_softmax") and args[0].dtype == torch.bool:
        return False  # eager accepts it only when empty, and then Dynamo's fake tensors reject it
    if out.is_floating_point():
        fin = out[~torch.isnan(out)]
        if fin.numel() and (torch.isinf(fin).any() or fin.abs().max().item() > _MAX_ABS[out.dtype]):
            return False
        if torch.isnan(out).any():
            nan_src = any(a.is_floating_point() and torch.isnan(a).any() for a in args)
            empty_mean = op.name == "mean" and args[0].shape[op.params[0]] == 0  # type: ignore[index]
            if not (nan_src or empty_mean):
                return False
    elif out.numel() and out.dtype != torch.bool and out.abs().max().item() > _MAX_ABS[out.dtype]:
        return False
    # exp amplifies its input's rounding error by |x|: past 4, ulp-level differences (coil's
    # interpreter formulas against libm) exceed float32's default rtol after a second exp.
    if op.name == "exp" and args[0].numel() and args[0].float().abs().max().item() > 4:
        return False
    # softmax, log_softmax and logsumexp subtract the largest value along the dim: their results
    # carry the input's absolute rounding error (ulps of |x|), which past |x| = 8 exceeds
    # float32's default tolerance on results of a few units (seed 4101: exp(x) ** 3, up to 403,
    # then log_softmax; coil's result was nearer fp64's than eager's)
    if (op.name in ("softmax", "log_softmax", "logsumexp") and args[0].is_floating_point() and not exact[0]
            and args[0].numel() and args[0].float().abs().max().item() > 8):
        return False
    if op.name in ARG_REDUCTIONS and not exact[0] and args[0].numel():
        x = args[0].float() * (1 if op.name == "argmax" else -1)
        dim = int(op.params[0])  # type: ignore[call-overload]
        best = x.amax(dim=dim, keepdim=True)
        if ((x >= best - _margin(args[0], low)).sum(dim=dim) > 1).any():
            return False  # a near-tie: rounding may pick another index
    if op.name in _STEPS and args[0].is_floating_point() and not exact[0] and _near_step(args[0], _STEPS[op.name], low):
        return False
    if op.name == "where" and not (exact[0] and exact[1]):
        a, b = torch.broadcast_tensors(args[0].float(), args[1].float())
        if a.numel() and ((a - b).abs() < _margin(a, low) + _margin(b, low)).any():
            return False
    if op.name == "cast" and args[0].is_floating_point() and not exact[0]:
        to = DTYPES[str(op.params[0])]
        if to == torch.bool and _near_step(args[0], "zero", low):
            return False
        if not to.is_floating_point and to != torch.bool and _near_step(args[0], "integer", low):
            return False
    return True


# Where each op's result jumps (float inputs): round half to even at x.5, floor/ceil/trunc at the
# integers, sign and truthiness at zero. Casts to integers and to bool jump where trunc and
# truthiness do.
_STEPS = {"round": "half", "floor": "integer", "ceil": "integer", "trunc": "integer",
          "sign": "zero", "any": "zero", "all": "zero"}


def _near_step(t: torch.Tensor, step: str, low: bool) -> bool:
    """Whether a value of `t` lies within rounding distance (`_margin`) of a `step` ("integer",
    "half": x.5, or "zero"), where another computation of it may land on the other side."""
    if not t.numel():
        return False
    x, m = t.float(), _margin(t, low)
    if step == "zero":
        return bool((x.abs() < m).any())
    frac = (x - x.trunc()).abs()
    if step == "half":
        return bool(((frac - 0.5).abs() < m).any())
    return bool(((frac < m) | (frac > 1 - m)).any())


def _is_exact(op: Op, exact: Sequence[bool], out: torch.Tensor) -> bool:
    """Whether every backend computes this value bit-exactly (so comparisons on it are safe)."""
    if op.name in VIEWS or op.name in ("where", "where_b", "amax", "amin", "cat", "flip", "index_select"):
        return all(exact[i] for i in range(len(exact)) if i >= (2 if op.name == "where" else 0))
    if op.name == "cast":
        return exact[0]
    if not out.is_floating_point():
        return True
    return op.name in ("relu", "abs", "neg", "maximum", "minimum", "clamp_s", *ROUNDING) and all(exact)


def uses_float16(prog: Program) -> bool:
    """Whether float16 appears anywhere (then float results carry only float16 precision)."""
    return any(i.dtype == "float16" for i in prog.inputs) or any(
        op.name == "cast" and op.params[0] == "float16" for op in prog.ops
    )


# ---------------------------------------------------------------------------------- strategy

_SIZES = st.sampled_from([1, 2, 3, 4, 5, 7, 8, 16, 0])
# split mode: one long dim, the others short enough to keep the tensors small for the interpreter
_LONG_SIZES = st.sampled_from([24, 64, 100, 300])
_SHORT_SIZES = st.sampled_from([1, 2, 3, 5])
SPLIT_MIN = 2  # split_reduction_min in split mode: chunks of two elements split


@st.composite
def programs(draw: st.DrawFn, max_ops: int = 8, split: bool | None = None, dynamic: bool = False) -> Program:
    """A random program; `split` True or False forces split mode on or off, None draws it (weight
    1/4); `dynamic` compiles it in dynamic mode (never drawn: the random draws stay as they are)."""
    if split is None:
        split = draw(st.integers(0, 3)) == 0
    if split:
        rank = draw(st.integers(1, 3))
        base = [draw(_SHORT_SIZES) for _ in range(rank)]
        base[draw(st.integers(0, rank - 1))] = draw(_LONG_SIZES)
    else:
        rank = draw(st.integers(0, 4))
        base = [draw(_SIZES) for _ in range(rank)]
    n_inputs = draw(st.integers(1, 3))
    inputs: list[Input] = []
    for _ in range(n_inputs):
        drop = draw(st.integers(0, rank)) if rank else 0
        shape = list(base[drop:])
        for j in range(len(shape)):
            if draw(st.integers(0, 3)) == 0:
                shape[j] = 1
        dtype = draw(st.sampled_from(["float32", "float32", "float16", "int32", "int64", "bool"]))
        layout = draw(st.sampled_from(LAYOUTS)) if shape else "contiguous"
        dim = 0
        if layout == "transposed":
            if len(shape) < 2:
                layout = "contiguous"
            else:
                dim = draw(st.integers(0, len(shape) - 2))
        elif layout != "contiguous":
            dim = draw(st.integers(0, len(shape) - 1))
        inputs.append(Input(tuple(shape), dtype, layout, dim))
    seed = draw(st.integers(0, 2**16))
    prog = Program(inputs, [], [], seed, split_min=SPLIT_MIN if split else None, dynamic=dynamic)
    vals: list[torch.Tensor] = prog.make_inputs()
    exact: list[bool] = [True] * n_inputs

    n_ops = draw(st.integers(1, max_ops))
    attempts = 0
    while len(prog.ops) < n_ops and attempts < 12 * n_ops:
        attempts += 1
        op = _draw_op(draw, vals, split)
        if op is None:
            continue
        args = [vals[s] for s in op.srcs]
        try:
            out = apply(op, args)
        except (RuntimeError, IndexError, ValueError, TypeError):
            continue
        ex = [exact[s] for s in op.srcs]
        if not _robust(op, args, ex, out, uses_float16(prog)):
            continue
        prog.ops.append(op)
        vals.append(out)
        exact.append(_is_exact(op, ex, out))
    if not prog.ops:  # always compute something
        prog.ops.append(Op("add_s", (0,), (1,)))
        vals.append(vals[0] + 1)
    last = len(vals) - 1
    outs = [last]
    if draw(st.booleans()) and last > 0:
        other = draw(st.integers(0, last - 1))
        outs.append(other)
    prog.outputs = outs
    return prog


def _draw_op(draw: st.DrawFn, vals: list[torch.Tensor], split: bool = False) -> Op | None:
    """One op on `vals`, or None when the drawn kind does not apply. In split mode 8 of the 22
    kinds are reductions (2 of 16 otherwise), along a long dim (>= 24) whenever the value has one."""
    n = len(vals)
    # Prefer recent values so programs chain rather than fan out from the inputs.
    def pick() -> int:
        return draw(st.one_of(st.just(n - 1), st.integers(0, n - 1)))

    kind = draw(st.sampled_from(
        ["unary", "binary", "binary", "scalar", "where", "where_b", "cast", "reduce", "reduce", "view", "view", "view",
         "cat", "flip", "int_binary", "index_select"]
        + ["reduce"] * 6 * split
    ))
    if kind == "unary":
        return Op(draw(st.sampled_from(UNARY)), (pick(),))
    if kind == "binary":
        a, b = pick(), draw(st.integers(0, n - 1))
        try:
            torch.broadcast_shapes(vals[a].shape, vals[b].shape)
        except RuntimeError:
            return None
        return Op(draw(st.sampled_from(BINARY)), (a, b))
    if kind == "int_binary":  # integer (and bool) operands only: float floor division has steps
        ints = [i for i, v in enumerate(vals) if not v.is_floating_point()]
        if not ints:
            return None
        a, b = draw(st.sampled_from(ints)), draw(st.sampled_from(ints))
        try:
            torch.broadcast_shapes(vals[a].shape, vals[b].shape)
        except RuntimeError:
            return None
        return Op(draw(st.sampled_from(INT_BINARY)), (a, b))
    if kind == "scalar":
        name = draw(st.sampled_from(SCALAR))
        if name == "pow_s":
            return Op(name, (pick(),), (draw(st.sampled_from([2, 3])),))
        if name == "clamp_s":
            return Op(name, (pick(),), draw(st.sampled_from([(-1, 1), (0, 2), (-0.5, 1.5), (-2.5, -1)])))
        return Op(name, (pick(),), (draw(st.sampled_from([1, 2, -1, 0.5, -1.5, 3])),))
    if kind == "where":
        srcs = (pick(), draw(st.integers(0, n - 1)), draw(st.integers(0, n - 1)), draw(st.integers(0, n - 1)))
        return Op("where", srcs, (draw(st.sampled_from(sorted(CMPS))),))
    if kind == "where_b":
        bools = [i for i, v in enumerate(vals) if v.dtype == torch.bool]
        if not bools:
            return None
        return Op("where_b", (draw(st.sampled_from(bools)), pick(), draw(st.integers(0, n - 1))))
    if kind == "cast":
        return Op("cast", (pick(),), (draw(st.sampled_from(sorted(DTYPES))),))
    if kind == "cat":
        a, b = pick(), draw(st.integers(0, n - 1))
        if vals[a].dim() == 0:
            return None
        return Op("cat", (a, b), (draw(st.integers(-vals[a].dim(), vals[a].dim() - 1)),))
    src = pick()
    x = vals[src]
    r = x.dim()
    if kind == "index_select":  # repeats and any order; an index list into a dim of size > 0
        if r == 0:
            return None
        dim = draw(st.integers(0, r - 1))
        if x.shape[dim] == 0:
            return None
        idx = draw(st.lists(st.integers(0, x.shape[dim] - 1), min_size=1, max_size=4))
        return Op("index_select", (src,), (dim, *idx))
    if kind == "flip":
        if r == 0:
            return None
        return Op("flip", (src,), tuple(sorted(set(draw(st.lists(st.integers(0, r - 1), min_size=1, max_size=r))))))
    if kind == "reduce":
        if r == 0:
            return None
        long = [d for d in range(r) if x.shape[d] >= 24]
        dim = draw(st.sampled_from(long)) if split and long else draw(st.integers(-r, r - 1))
        name = draw(st.sampled_from(REDUCTIONS + DIMWISE))
        return Op(name, (src,), (dim,) if name in DIMWISE else (dim, draw(st.booleans())))
    view = draw(st.sampled_from(VIEWS))
    if view == "permute":
        if r < 2:
            return None
        return Op("permute", (src,), tuple(draw(st.permutations(range(r)))))
    if view == "transpose":
        if r < 2:
            return None
        return Op("transpose", (src,), (draw(st.integers(0, r - 1)), draw(st.integers(0, r - 1))))
    if view == "reshape":
        if not x.is_contiguous():
            return None
        return Op("reshape", (src,), _draw_reshape(draw, tuple(x.shape)))
    if view == "unsqueeze":
        return Op("unsqueeze", (src,), (draw(st.integers(-r - 1, r)),))
    if view == "squeeze":
        ones = [d for d in range(r) if x.shape[d] == 1]
        if not ones:
            return None
        return Op("squeeze", (src,), (draw(st.sampled_from(ones)),))
    if view == "slice":
        if r == 0:
            return None
        dim = draw(st.integers(0, r - 1))
        size = x.shape[dim]
        start = draw(st.integers(0, max(size, 0)))
        stop = draw(st.integers(start, size + 1))
        step = draw(st.sampled_from([1, 2, 3]))
        return Op("slice", (src,), (dim, start, stop, step))
    if view == "expand":
        ones = [d for d in range(r) if x.shape[d] == 1]
        shape = list(x.shape)
        for d in ones:
            if draw(st.booleans()):
                shape[d] = draw(st.sampled_from([2, 3, 4]))
        lead = [draw(st.sampled_from([1, 2, 3]))] if draw(st.integers(0, 3)) == 0 else []
        if shape == list(x.shape) and not lead:
            return None
        return Op("expand", (src,), tuple(lead + shape))
    return Op("contiguous", (src,))


def _draw_reshape(draw: st.DrawFn, shape: tuple[int, ...]) -> tuple[int, ...]:
    numel = math.prod(shape)
    if numel == 0:
        return draw(st.sampled_from([(0,), (0, *shape[1:]), (-1, 0) if len(shape) else (0,)]))
    choice = draw(st.integers(0, 3))
    if choice == 0:
        return (numel,)
    if choice == 1:
        return (-1,)
    divisors = [d for d in range(1, numel + 1) if numel % d == 0]
    d = draw(st.sampled_from(divisors))
    if choice == 2:
        return (d, numel // d)
    e = draw(st.sampled_from([k for k in range(1, numel // d + 1) if (numel // d) % k == 0]))
    return (d, e, numel // d // e)
