"""`coil bench`'s cases and how a command line selects them.

The suite, in run order: the micro cases (`<op>_<dtype>`, coil.bench.micro), the GEMM cases
(group "gemm", `gemm_<form>_<sizes>`, coil.bench.gemm), the attention cases (group "attention",
`attn_<form>_fwd` and `_fwdbwd`, coil.bench.attention), the five hand-picked model cases (group
"models", coil.bench.classic) and the zoo's (group "zoo", `zoo_<name>_<step>`,
coil.bench.zoo_cases). Without names a run takes the micro and the "models" cases (`DEFAULT`);
the gemm, attention and zoo groups are asked for by name.

A name selects (`select`), the selections joined in the order given, each case once:

- a case (`gpt2_train_amp`, `zoo_t5_infer_bf16`), a micro op (`softmax`: bf16 and fp32), an
  attention form (`attn_causal`: its fwd and fwdbwd cases), a model (`gpt2`, `zoo_llama`, or a zoo model's own name where no hand-picked model has it:
  `llama`) with each of its step kinds;
- a group: `all`, `micro`, `gemm`, `attention`, `models`, `zoo`, `zoo-<kind>` (`zoo-decoder`,
  `zoo-encoder`, `zoo-encdec`, `zoo-vision`), or a family, in any case (`llama`, `gpt-neox`, `swin`);
- any of these with `:<step>` keeps one step kind of its model cases: `:infer` (infer_bf16),
  `:train` (train_amp), `:accum` (train_accum) or `:opt` (train_opt), e.g. `zoo-vision:infer`,
  `models:train`.

`case_modes(case, asked)` gives the modes a case runs: without `--modes` its group's (`MODES`,
plus `inductor_max` and `coil_max` for a gemm case and `flex` for an attention case), with `--modes` those of
the modes asked for that apply to it (`flex` applies to attention cases only).
"""

from __future__ import annotations

from collections.abc import Sequence

from coil.bench.attention import ATTENTION
from coil.bench.gemm import GEMM
from coil.bench.kernel_case import KernelCase
from coil.bench.measure import ALL_MODES, MODES
from coil.bench.micro import DTYPES, MICRO
from coil.bench.models import model_cases, specs, split

DEFAULT = ("micro", "models")
STEP_NAMES = {"infer": "infer_bf16", "train": "train_amp", "accum": "train_accum", "opt": "train_opt"}


def micro_names() -> list[str]:
    """Every micro case, `<op>_<dtype>`."""
    return [f"{m.base}_{d}" for d in DTYPES for m in MICRO]


def kernel_cases() -> dict[str, KernelCase]:
    """The gemm and attention cases by name, in run order."""
    return {c.name: c for c in (*GEMM, *ATTENTION)}


def suite_names() -> list[str]:
    """Every case name, in run order."""
    return micro_names() + list(kernel_cases()) + model_cases()


def case_modes(case: str, asked: Sequence[str] | None = None) -> tuple[str, ...]:
    """The modes `case` runs, in ALL_MODES's order (module docstring): its group's without
    `asked`, else those of `asked` that apply to it (possibly none)."""
    kernel = kernel_cases().get(case)
    group = kernel.group if kernel else ""
    if asked is None:
        extra = {"gemm": ("inductor_max", "coil_max"), "attention": ("flex",)}.get(group, ())
        asked = (*MODES, *extra)
    return tuple(m for m in ALL_MODES if m in asked and (m != "flex" or group == "attention"))


def _group(name: str) -> list[str]:
    """The cases a name without a step filter selects (module docstring), [] for none."""
    every = suite_names()
    cases = model_cases()
    low = name.lower()
    if low == "all":
        return every
    if low == "micro":
        return micro_names()
    if low in ("gemm", "attention"):
        return [n for n, c in kernel_cases().items() if c.group == low]
    if low in ("models", "zoo"):
        return [c for c in cases if split(c)[0].group == low]
    if low.startswith("zoo-"):
        return [c for c in cases if (s := split(c)[0]).group == "zoo" and s.kind == low[4:]]
    by_spec = specs()
    if name in by_spec or f"zoo_{name}" in by_spec:
        prefix = name if name in by_spec else f"zoo_{name}"
        return [c for c in cases if split(c)[0].name == prefix]
    family = [c for c in cases if split(c)[0].family.lower() == low]
    if family:
        return family
    by_op = micro_names() + [n for n, c in kernel_cases().items() if c.group == "attention"]
    return [c for c in every if c == name or (c in by_op and c.rsplit("_", 1)[0] == name)]


def select(names: Sequence[str]) -> list[str]:
    """The cases `names` select (module docstring): DEFAULT's without names. ValueError naming
    a name that selects nothing."""
    out: list[str] = []
    for n in names or DEFAULT:
        group, _, step = n.partition(":")
        if step and step not in STEP_NAMES:
            raise ValueError(f"unknown step {step!r} in {n!r}; known: {', '.join(STEP_NAMES)}")
        hit = _group(group)
        if step:
            hit = [c for c in hit if c.endswith("_" + STEP_NAMES[step])]
        if not hit:
            raise ValueError(f"unknown case {n!r}; `coil bench --list` names every case, the module "
                             "docstring of coil.bench.suite the groups")
        out += [c for c in hit if c not in out]
    return out
