"""`coil bench`'s cases and how a command line selects them.

The suite, in run order: the micro cases (`<op>_<dtype>`, coil.bench.micro), the five
hand-picked model cases (group "models", coil.bench.classic) and the zoo's (group "zoo",
`zoo_<name>_<step>`, coil.bench.zoo_cases). Without names a run takes the micro and the
"models" cases (`DEFAULT`); the zoo is asked for by name.

A name selects (`select`), the selections joined in the order given, each case once:

- a case (`gpt2_train_amp`, `zoo_t5_infer_bf16`), a micro op (`softmax`: bf16 and fp32), a
  model (`gpt2`, `zoo_llama`, or a zoo model's own name where no hand-picked model has it:
  `llama`) with each of its step kinds;
- a group: `all`, `micro`, `models`, `zoo`, `zoo-<kind>` (`zoo-decoder`, `zoo-encoder`,
  `zoo-encdec`, `zoo-vision`), or a family, in any case (`llama`, `gpt-neox`, `swin`);
- any of these with `:<step>` keeps one step kind of its model cases: `:infer` (infer_bf16),
  `:train` (train_amp) or `:accum` (train_accum), e.g. `zoo-vision:infer`, `models:train`.
"""

from __future__ import annotations

from collections.abc import Sequence

from coil.bench.micro import DTYPES, MICRO
from coil.bench.models import model_cases, specs, split

DEFAULT = ("micro", "models")
STEP_NAMES = {"infer": "infer_bf16", "train": "train_amp", "accum": "train_accum"}


def micro_names() -> list[str]:
    """Every micro case, `<op>_<dtype>`."""
    return [f"{m.base}_{d}" for d in DTYPES for m in MICRO]


def suite_names() -> list[str]:
    """Every case name, in run order."""
    return micro_names() + model_cases()


def _group(name: str) -> list[str]:
    """The cases a name without a step filter selects (module docstring), [] for none."""
    every = suite_names()
    cases = model_cases()
    low = name.lower()
    if low == "all":
        return every
    if low == "micro":
        return micro_names()
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
    return [c for c in every if c == name or (c in micro_names() and c.rsplit("_", 1)[0] == name)]


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
