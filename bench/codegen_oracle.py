"""Dump-and-diff oracle for compile-time work: coil's generated code must not change.

    python bench/codegen_oracle.py dump DIR [--case NAME ...] [--no-run]  # artefacts of every case under DIR/<case>
    python bench/codegen_oracle.py diff DIR_A DIR_B              # exit 1 when generated code differs
    python bench/codegen_oracle.py time [--case NAME ...] [--repeat N] [--json PATH]  # stage CPU seconds

Each case runs in a fresh process of the code beside this script (its package sources lead
PYTHONPATH, and the case fails if a coil package came from elsewhere) with cold caches
(COIL_GRAPH_CACHE=0, COIL_AOT_CACHE=0, empty
COIL_CACHE_DIR, TORCHINDUCTOR_CACHE_DIR and TRITON_CACHE_DIR), on the CPU with kernels under
Triton's interpreter, seed 0, PYTHONHASHSEED=0 (so no set's iteration order can differ
between two dumps). `dump` also sets COIL_ORDER_TIME=0 unless `--order-time S` is given: the
memory planner's order search is bounded by wall time, so on a graph where it runs out of time
(GPT-2's large backward) the step order it picks moves with the machine's load, and two dumps
of the same code differ; with 0 the fused order is kept and everything else is deterministic.
`dump` sets COIL_DEBUG_DIR=DIR/<case> (coil.backend.debug.artefacts: one folder per compiled graph)
and notes the tree's path in DIR/tree.txt; `--no-run` skips the kernel launches (the
interpreter's run is most of a large case's time; the compile and its artefacts are the same,
the outputs garbage). `diff` compares, graph by graph, what must stay identical — every kernel
source (kernels/*.py), the wrapper (07_wrapper.py), the memory plan (05_memory_plan.txt) and
the schedule with its fusion log (04_schedule.txt) — and reports the intermediate dumps
(02_post_grad_graph.txt, 03_lowered_ir.txt, 08_wrapper_fx.txt; the trees' paths in their traced
source locations masked) as
informational. `time` runs the cases without a debug dir (the debug dir adds per-pass graph
prints to the post-grad stage) and without launching kernels, and prints `GraphStats.stage_times`
summed per case in CPU seconds of the process (the minimum over `--repeat` fresh processes), with
scheduling split into fusion and memory-planner ordering; the default COIL_ORDER_TIME applies.

Cases (CASES): GPT-2 (HF GPT2LMHeadModel from its config, 2 layers, eager attention, batch
1 x 32) training step and inference; a ResNet-18 written here (torchvision's layout: basic blocks
[2, 2, 2, 2], batch 2 x 3 x 64 x 64; torchvision is not installed on the CPU box) training step;
tests-integration's MLP, transformer block and small CNN, training and inference. EXTRA_CASES
(not run unless named): GPT-2 with 12 layers x 128 tokens, training and inference, and ResNet-50
(bottlenecks [3, 4, 6, 3]) training at 2 x 3 x 64 x 64.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from coil.knobs import knobs

ROOT = Path(__file__).resolve().parent.parent
MUST_MATCH = ("04_schedule.txt", "05_memory_plan.txt", "07_wrapper.py")
INFORMATIONAL = ("02_post_grad_graph.txt", "03_lowered_ir.txt", "08_wrapper_fx.txt")

CASES = ("gpt2_train", "gpt2_infer", "resnet18_train", "mlp_train", "mlp_infer",
         "transformer_block_train", "transformer_block_infer", "cnn_train", "cnn_infer")
# larger cases for `time` (and `dump --case`): GPT-2 12 layers x 128 tokens, ResNet-50 (bottlenecks
# [3, 4, 6, 3]) at 2 x 3 x 64 x 64
EXTRA_CASES = ("gpt2x12_train", "gpt2x12_infer", "resnet50_train")


def _resnet(bottleneck: bool, layers: tuple[int, int, int, int]) -> Any:
    """torchvision's ResNet layout: basic blocks (ResNet-18: [2, 2, 2, 2]) or bottlenecks
    (ResNet-50: [3, 4, 6, 3], expansion 4), widths 64..512, 1000 classes."""
    import torch.nn as nn

    def conv_bn(cin: int, cout: int, k: int, stride: int) -> list[nn.Module]:
        return [nn.Conv2d(cin, cout, k, stride, k // 2, bias=False), nn.BatchNorm2d(cout)]

    class Block(nn.Module):
        def __init__(self, cin: int, width: int, stride: int) -> None:
            super().__init__()
            cout = width * 4 if bottleneck else width
            if bottleneck:
                body = [*conv_bn(cin, width, 1, 1), nn.ReLU(), *conv_bn(width, width, 3, stride), nn.ReLU(),
                        *conv_bn(width, cout, 1, 1)]
            else:
                body = [*conv_bn(cin, width, 3, stride), nn.ReLU(), *conv_bn(width, cout, 3, 1)]
            self.body = nn.Sequential(*body)
            self.down = nn.Sequential(*conv_bn(cin, cout, 1, stride)) if stride != 1 or cin != cout else None
            self.out_channels = cout

        def forward(self, x: Any) -> Any:
            idt = x if self.down is None else self.down(x)
            return (self.body(x) + idt).relu()

    class ResNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(*conv_bn(3, 64, 7, 2), nn.ReLU(), nn.MaxPool2d(3, 2, 1))
            blocks: list[Block] = []
            cin = 64
            for n, (width, stride) in zip(layers, ((64, 1), (128, 2), (256, 2), (512, 2)), strict=True):
                for i in range(n):
                    blocks.append(Block(cin, width, stride if i == 0 else 1))
                    cin = blocks[-1].out_channels
            self.blocks = nn.Sequential(*blocks)
            self.fc = nn.Linear(cin, 1000)

        def forward(self, x: Any) -> Any:
            return self.fc(self.blocks(self.stem(x)).mean((2, 3)))

    return ResNet()


def _case(name: str) -> tuple[Any, Callable[[Any], None]]:
    """The model of case `name` and its step (forward, plus the backward of a loss for training)."""
    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    model_name, mode = name.rsplit("_", 1)
    if model_name in ("gpt2", "gpt2x12"):
        from transformers import GPT2Config, GPT2LMHeadModel

        layers, seq = (2, 32) if model_name == "gpt2" else (12, 128)
        model: Any = GPT2LMHeadModel(GPT2Config(n_layer=layers, attn_implementation="eager"))  # type: ignore[call-arg]
        ids = torch.randint(0, model.config.vocab_size, (1, seq))
        if mode == "train":  # HF's own loss (a graph break before it: two graphs each way)
            return model, lambda m: m(ids, labels=ids).loss.backward()
        inputs: tuple[Any, ...] = (ids,)
        loss: Callable[[Any], Any] = lambda out: out.logits  # noqa: E731
    elif model_name in ("resnet18", "resnet50"):
        model = _resnet(model_name == "resnet50", (3, 4, 6, 3) if model_name == "resnet50" else (2, 2, 2, 2))
        inputs = (torch.randn(2, 3, 64, 64),)
        labels = torch.randint(0, 1000, (2,))
        loss = lambda out: F.cross_entropy(out, labels)  # noqa: E731
    else:
        sys.path.insert(0, str(ROOT / "tests-integration"))
        from models import MODELS  # type: ignore[import-not-found]

        cls, shape = MODELS[model_name]
        model = cls()
        inputs = (torch.randn(*shape),)
        loss = lambda out: out.float().pow(2).mean()  # noqa: E731
    if mode == "infer":
        model.eval()

    def step(m: Any) -> None:
        if mode == "infer":
            with torch.no_grad():
                m(*inputs)
        else:
            loss(m(*inputs)).backward()
    return model, step


def _run_one(name: str, out: Path | None, run: bool = True, cpu: bool = False) -> None:
    """Compile and run case `name` once in this process; write its stage times to `out`.

    `run=False` skips every kernel launch (the interpreter's run is most of a first call on the
    CPU; the outputs are then garbage, the compile is the same). `cpu=True` times the stages in
    this process's CPU seconds instead of wall seconds (steadier on a shared machine)."""
    import types

    import torch

    sys.path.insert(0, str(ROOT / "bench"))
    import coil.backend
    import coil.backend.pipeline.compile as backend_compile
    import compile_profile  # type: ignore[import-not-found]
    from coil.backend.stats import COMPILED, stage_totals
    from coil.runtime.kernel import Kernel

    if not run:
        Kernel._launch_slow = lambda self, grid, *args: None  # type: ignore[method-assign]
    if cpu:  # the stage timers read `time.perf_counter` through these modules
        clock = types.SimpleNamespace(perf_counter=time.process_time)
        backend_compile.time = clock  # type: ignore[assignment,attr-defined]
        compile_profile.time = clock
    model, step = _case(name)
    _check_tree()
    torch._dynamo.reset()
    coil.backend.reset()
    parts: dict[str, float] = {}
    t0 = time.perf_counter()
    with compile_profile._timed_parts(parts):
        step(torch.compile(model, backend="coil"))
    first = time.perf_counter() - t0
    res = {"case": name, "first_call_s": first, "stages": stage_totals(COMPILED), "scheduler_parts": parts,
           "graphs": {s.name: s.stage_times for s in COMPILED}, "clock": "cpu" if cpu else "wall",
           "kernels": sum(s.kernels for s in COMPILED), "eager_fallbacks": [s.name for s in COMPILED if s.eager_fallback]}
    if out is not None:
        out.write_text(json.dumps(res, indent=1))


def _tree_path(inherited: str | None) -> str:
    """PYTHONPATH for a case: this tree's package sources first, so that the dump is of the
    code beside this script whatever else the environment puts on the path (a PYTHONPATH that
    names another tree must not make two dumps of different trees identical)."""
    srcs = [str(p) for p in sorted((ROOT / "packages").glob("*/src"))] + [str(ROOT / "meta" / "src")]
    return os.pathsep.join(srcs + ([inherited] if inherited else []))


def _check_tree() -> None:
    """Fail when a coil package in this process was imported from outside this tree."""
    foreign = sorted(f"{name} from {mod.__file__}" for name, mod in list(sys.modules.items())
                     if name.startswith("coil.") and name.count(".") == 1 and getattr(mod, "__file__", None)
                     and ROOT not in Path(str(mod.__file__)).resolve().parents)
    if foreign:
        raise SystemExit(f"codegen_oracle: coil imported from outside {ROOT}: {'; '.join(foreign)}")


def _spawn(name: str, debug_dir: Path | None, times: Path, order_time: float | None = None,
           extra: tuple[str, ...] = ()) -> dict[str, Any]:
    """Run one case in a fresh process with cold caches; its stage times."""
    with tempfile.TemporaryDirectory(prefix="coil-oracle-") as tmp:
        chosen: dict[str, object] = {} if order_time is None else {"order_time": order_time}
        env = knobs.environ(graph_cache=False, aot_cache=False, triton_interpret=True,
                            cache_dir=f"{tmp}/coil", inductor_cache_dir=f"{tmp}/inductor",
                            triton_cache_dir=f"{tmp}/triton",
                            debug_dir=None if debug_dir is None else str(debug_dir), **chosen)
        env.update(PYTHONPATH=_tree_path(env.get("PYTHONPATH")), PYTHONHASHSEED="0")
        subprocess.run([sys.executable, __file__, "_one", name, "--json", str(times), *extra], env=env, check=True)
    result: dict[str, Any] = json.loads(times.read_text())
    return result


def _print_times(r: dict[str, Any]) -> None:
    total = sum(r["stages"].values())
    parts = ", ".join(f"{k} {v:.2f}" for k, v in r["scheduler_parts"].items())
    stages = ", ".join(f"{k} {v:.2f}" for k, v in r["stages"].items())
    print(f"{r['case']}: coil stages {total:.2f} s ({stages}; scheduling = {parts}); "
          f"first call {r['first_call_s']:.1f} s, {r['kernels']} kernels", flush=True)


def dump(root: Path, cases: list[str], order_time: float, run: bool = True) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / "tree.txt").write_text(str(ROOT))  # `diff` reads the dumped tree's path out of traced source paths
    for name in cases:
        folder = root / name
        folder.mkdir(exist_ok=True)
        _print_times(_spawn(name, folder, root / f"{name}.times.json", order_time, () if run else ("--no-run",)))


def time_cases(cases: list[str], out: Path | None, repeat: int) -> None:
    """Each case `repeat` times (fresh processes, cold caches, no kernel launches, CPU seconds);
    per stage the minimum over the repeats."""
    results = []
    with tempfile.TemporaryDirectory(prefix="coil-oracle-times-") as tmp:
        for n in cases:
            runs = [_spawn(n, None, Path(tmp) / f"{n}.{i}.json", extra=("--no-run", "--cpu")) for i in range(repeat)]
            best = dict(runs[0])
            for key in ("stages", "scheduler_parts"):
                best[key] = {k: min(r[key].get(k, 0.0) for r in runs) for k in runs[0][key]}
            best["repeats"] = repeat
            _print_times(best)
            results.append(best)
    if out is not None:
        out.write_text(json.dumps(results, indent=1))


def _files(graph: Path) -> list[str]:
    names = [f"kernels/{p.name}" for p in sorted((graph / "kernels").glob("*.py"))]
    return [*MUST_MATCH, *names]


def diff(a: Path, b: Path) -> int:
    """Compare two dumps; print what differs. 0 when every must-match file is identical."""
    bad = 0
    trees = [(d / "tree.txt").read_text() if (d / "tree.txt").exists() else None for d in (a, b)]

    def text(p: Path, tree: str | None) -> str | None:
        if not p.exists():
            return None
        t = p.read_text()
        return t.replace(tree, "<tree>") if tree else t

    for case_a in sorted(p for p in a.iterdir() if p.is_dir()):
        case_b = b / case_a.name
        graphs = sorted(p.name for p in case_a.iterdir() if p.is_dir())
        graphs_b = sorted(p.name for p in case_b.iterdir() if p.is_dir()) if case_b.is_dir() else []
        if graphs != graphs_b:
            print(f"{case_a.name}: graphs differ: {graphs} vs {graphs_b}")
            bad += 1
            continue
        same = info = 0
        for g in graphs:
            files = sorted(set(_files(case_a / g)) | set(_files(case_b / g)))
            for rel, must in [(f, True) for f in files] + [(f, False) for f in INFORMATIONAL]:
                pa, pb = case_a / g / rel, case_b / g / rel
                ta, tb = text(pa, trees[0]), text(pb, trees[1])
                if ta == tb:
                    same += must
                    continue
                if not must:
                    info += 1
                    print(f"  (informational) {case_a.name}/{g}/{rel} differs")
                    continue
                bad += 1
                print(f"{case_a.name}/{g}/{rel} differs:")
                lines = difflib.unified_diff((ta or "").splitlines(), (tb or "").splitlines(), lineterm="", n=1)
                for i, line in enumerate(lines):
                    if i >= 40:
                        print("  ...")
                        break
                    print(f"  {line}")
        print(f"{case_a.name}: {len(graphs)} graphs, {same} files identical, {info} informational differences")
    print("IDENTICAL" if bad == 0 else f"DIFFERENT: {bad} files or cases")
    return 0 if bad == 0 else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("dump")
    p.add_argument("dir", type=Path)
    p.add_argument("--case", action="append", choices=CASES + EXTRA_CASES)
    p.add_argument("--order-time", type=float, default=0.0, help="COIL_ORDER_TIME for the dump (default 0)")
    p.add_argument("--no-run", action="store_true", help="skip kernel launches (same compile, garbage outputs)")
    p = sub.add_parser("diff")
    p.add_argument("a", type=Path)
    p.add_argument("b", type=Path)
    p = sub.add_parser("time")
    p.add_argument("--case", action="append", choices=CASES + EXTRA_CASES)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--json", type=Path, default=None)
    p = sub.add_parser("_one")  # internal: one case in this process
    p.add_argument("name", choices=CASES + EXTRA_CASES)
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--no-run", action="store_true")
    p.add_argument("--cpu", action="store_true")
    a = ap.parse_args(argv)
    if a.cmd == "dump":
        dump(a.dir, a.case or list(CASES), a.order_time, run=not a.no_run)
    elif a.cmd == "diff":
        return diff(a.a, a.b)
    elif a.cmd == "time":
        time_cases(a.case or list(CASES), a.json, a.repeat)
    else:
        _run_one(a.name, a.json, run=not a.no_run, cpu=a.cpu)
    return 0


if __name__ == "__main__":
    sys.exit(main())
