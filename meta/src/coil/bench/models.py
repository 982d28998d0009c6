"""The model half of `coil bench`: HF GPT-2, BERT-base, a Llama-style decoder, ResNet-50, ViT-B/16.

Every model is built from its config with random weights (seed 0), on CUDA, and measured two ways:

* `<model>_infer_bf16`: the model in bf16, `eval()`, under `torch.no_grad()`;
* `<model>_train_amp`: one training step — `zero_grad`, forward and loss under
  `torch.autocast("cuda", torch.bfloat16)` with fp32 weights, backward (no optimizer). Dropout
  is set to 0 so that every mode computes the same function.

Accuracy follows the PyTorch benchmark harness's rule against an fp64 copy of the model run
without autocast: RMSE(mode) <= 3 * RMSE(eager) + tol / 10 (tol 1e-2) for the output (inference)
or for the loss and every gradient (training), checked on the third call (ACCURACY_CALL): a
CUDA-graph runner returns its eager warm-up from the first call and replays from the second (or
third) on. The cold and the warm first call are each measured in a new process
(`new_process_first_call`): empty cache folders, then the folders the cold one filled, the warm
one in `warm_runs()` processes (default 3, `coil bench --warm-runs`) whose median is reported;
the bench's own process then compiles from those caches for the timings, memory and accuracy.
With `coil bench --precompile` both processes of every mode (Inductor's too) run under torch's
caching precompile (TORCH_CACHING_PRECOMPILE=1): the cold one saves Dynamo's package after its
step (`torch.compiler.save_cache_artifacts`, not timed), and the warm one loads it, skipping
Dynamo's tracing where torch can package the model. The bench's own process does not use it. The
references and the model's master copy wait on the host while the modes run: each mode's
device memory is its own model copy, the inputs and its work.
"""

from __future__ import annotations

import copy
import functools
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coil.knobs import KNOBS, Knobs, knobs

TOL = 1e-2
ACCURACY_CALL = 3
# set by `coil bench --precompile` (knob bench_precompile): the first-call processes run under
# torch's caching precompile (`new_process_first_call`)
PRECOMPILE_ENV = KNOBS["bench_precompile"].env
# how many warm-start processes each compiled mode of a model case runs (`coil bench
# --warm-runs`, knob bench_warm_runs, default WARM_RUNS); the case reports their median (`warm_median`)
WARM_RUNS_ENV = KNOBS["bench_warm_runs"].env
WARM_RUNS = Knobs.bench_warm_runs.default_value(knobs)
MULTIPLIER = 3.0


def precompile_requested() -> bool:
    """Whether this bench run measures first calls under torch's caching precompile."""
    return bool(knobs.bench_precompile)


def warm_runs() -> int:
    """The number of warm-start processes per compiled mode: WARM_RUNS_ENV, else WARM_RUNS.
    Raises ValueError, naming the variable, when it is set to anything but a positive integer."""
    return int(knobs.bench_warm_runs)


def warm_median(runs: list[float | str]) -> float | str:
    """One figure for a mode's warm start from its processes' first calls: the median of the
    seconds when every process gave them; otherwise the first failure's message (a failed warm
    start is reported, never averaged away). A single process's figure is one sample of a noisy
    quantity: one process in session 26 took 5.8 s where others of the same case took 3.2-4.1."""
    if not runs:
        raise ValueError("no warm-start process ran")
    failed = [r for r in runs if not isinstance(r, float)]
    return failed[0] if failed else statistics.median(r for r in runs if isinstance(r, float))


@dataclass(frozen=True)
class ModelSpec:
    """How to build one model and its inputs, and what its output and loss are."""

    name: str
    describe: str
    build: Callable[[], Any]  # -> nn.Module on CUDA, fp32, random weights
    inputs: Callable[[Any], tuple[Any, ...]]  # model -> positional inputs on CUDA
    output: Callable[[Any], Any]  # forward result -> the tensor compared for accuracy
    loss: Callable[[Any, tuple[Any, ...]], Any]  # (model, inputs) -> scalar loss


def _ids(vocab: int, batch: int = 4, seq: int = 512) -> tuple[Any, ...]:
    import torch

    g = torch.Generator(device="cuda").manual_seed(1)
    return (torch.randint(0, vocab, (batch, seq), device="cuda", generator=g),)


def _images(batch: int = 32) -> tuple[Any, ...]:
    import torch

    g = torch.Generator(device="cuda").manual_seed(1)
    return (torch.randn(batch, 3, 224, 224, device="cuda", generator=g),)


def _lm_loss(model: Any, inputs: tuple[Any, ...]) -> Any:
    return model(inputs[0], labels=inputs[0]).loss


def _image_loss(model: Any, inputs: tuple[Any, ...]) -> Any:
    import torch

    out = model(inputs[0])
    labels = torch.arange(out.shape[0], device=out.device) % out.shape[1]
    return torch.nn.functional.cross_entropy(out.float(), labels)


def _gpt2() -> Any:
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(GPT2Config(attn_implementation="eager"))  # type: ignore[call-arg]


def _bert() -> Any:
    from transformers import BertConfig, BertForMaskedLM

    return BertForMaskedLM(BertConfig(attn_implementation="eager"))  # type: ignore[call-arg]


def _llama() -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
                      num_attention_heads=16, num_key_value_heads=8, max_position_embeddings=1024,
                      attn_implementation="eager")  # type: ignore[call-arg]
    return LlamaForCausalLM(cfg)


def _resnet50() -> Any:
    import torchvision  # type: ignore[import-not-found, import-untyped, unused-ignore]

    return torchvision.models.resnet50()


def _vit() -> Any:
    import timm  # type: ignore[import-not-found, unused-ignore]

    return timm.create_model("vit_base_patch16_224", pretrained=False)


SPECS: dict[str, ModelSpec] = {s.name: s for s in (
    ModelSpec("gpt2", "HF GPT2LMHeadModel(GPT2Config()), eager attention, batch 4 x 512", _gpt2,
              lambda m: _ids(m.config.vocab_size), lambda o: o.logits, _lm_loss),
    ModelSpec("bert_base", "HF BertForMaskedLM(BertConfig()), eager attention, batch 4 x 512", _bert,
              lambda m: _ids(m.config.vocab_size), lambda o: o.logits, _lm_loss),
    ModelSpec("llama_style", "HF LlamaForCausalLM: 8 layers, hidden 1024, 16 heads / 8 KV heads, "
              "SwiGLU 2816, vocab 32000, batch 4 x 512", _llama,
              lambda m: _ids(m.config.vocab_size), lambda o: o.logits, _lm_loss),
    ModelSpec("resnet50", "torchvision resnet50(), batch 32 x 3 x 224 x 224", _resnet50,
              lambda m: _images(), lambda o: o, _image_loss),
    ModelSpec("vit_b16", "timm vit_base_patch16_224, batch 32 x 3 x 224 x 224", _vit,
              lambda m: _images(), lambda o: o, _image_loss),
)}  # fmt: skip
MODEL_CASES = tuple(f"{n}_{k}" for n in SPECS for k in ("infer_bf16", "train_amp"))
# rough seconds per case on an H100 (three modes, cold compiles, three warm-compile processes per
# compiled mode): inference cases took 88-136 s with one warm process (session 26)
EST_S = {c: (150.0 if c.endswith("infer_bf16") else 240.0) for c in MODEL_CASES}


def _rmse(a: Any, ref: Any) -> float:
    """Root mean square error of `a` against `ref`, in fp64 on `ref`'s device (the host: the
    bench keeps its references there)."""
    import torch

    return float(torch.sqrt(torch.mean((a.detach().to(ref.device, torch.float64) - ref.double()) ** 2)))


def _no_dropout(model: Any) -> None:
    import torch

    for mod in model.modules():
        if isinstance(mod, torch.nn.Dropout):
            mod.p = 0.0
        if hasattr(mod, "drop_path") and hasattr(mod.drop_path, "drop_prob"):
            mod.drop_path.drop_prob = 0.0


def _model(spec: ModelSpec) -> Any:
    import torch

    torch.manual_seed(0)
    m = spec.build().to("cuda")
    _no_dropout(m)
    return m


def compile_mode(fn: Any, mode: str) -> Any:
    """`fn` as run by one bench mode: itself (eager), `torch.compile` (Inductor) or coil."""
    import torch

    if mode == "eager":
        return fn
    if mode == "inductor":
        return torch.compile(fn)
    return torch.compile(fn, backend="coil")


def _as_model_dtype(model: Any, inputs: tuple[Any, ...]) -> tuple[Any, ...]:
    """Floating inputs (images) in the dtype of the model's weights (bf16, fp64 references)."""
    dtype = next(model.parameters()).dtype
    return tuple(x.to(dtype) if x.is_floating_point() else x for x in inputs)


def _infer_step(spec: ModelSpec, model: Any, inputs: tuple[Any, ...]) -> Any:
    import torch

    with torch.no_grad():
        return spec.output(model(*_as_model_dtype(model, inputs)))


def _train_step(spec: ModelSpec, model: Any, inputs: tuple[Any, ...], *, amp: bool = True) -> Any:
    import torch

    model.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        loss = spec.loss(model, _as_model_dtype(model, inputs))
    loss.backward()
    return loss.detach()


def _grads(model: Any) -> list[Any]:
    return [p.grad.detach().clone() for p in model.parameters() if p.grad is not None]


def first_call(case: str, mode: str) -> tuple[float, Callable[[], Any]]:
    """Seconds of the first call of `case` in `mode` in this process, and the step it ran (to
    call again). The clock runs from `torch.compile` to the end of the first step: Inductor
    imports its compiler (~230 modules beyond what `coil.backend` has imported) inside
    `torch.compile`, coil imports what it needs during its first compile, and a user waits for
    both. What every mode's process has imported before (torch, Dynamo, sympy, the model's
    library, `coil.backend`) is not counted."""
    import torch

    spec, kind = _split(case)
    model = _model(spec)
    inputs = spec.inputs(model)
    if kind == "infer_bf16":
        model = model.to(torch.bfloat16).eval()
    seconds, step, _ = _compile_and_step(spec, kind, model, inputs, mode)
    return seconds, step


def _compile_and_step(spec: ModelSpec, kind: str, model: Any, inputs: tuple[Any, ...], mode: str
                      ) -> tuple[float, Callable[[], Any], Any]:
    """`model` compiled by `mode` and its first step: the seconds from `torch.compile` to the end
    of the step (synchronised), the step (to call again) and the step's result."""
    import torch

    torch.cuda.synchronize()
    t0 = time.perf_counter()
    f = compile_mode(model, mode)
    step = functools.partial(_infer_step if kind == "infer_bf16" else _train_step, spec, f, inputs)
    out = step()
    torch.cuda.synchronize()
    return time.perf_counter() - t0, step, out


def own_process_peak(step: Callable[[], Any]) -> dict[str, Any]:
    """The warm peak (`bench._warm_peak`) of `step` in a process that ran nothing else: the call
    that `coil bench` reports as a mode's peak memory. Measured in the shared process instead, a
    mode inherits the allocator state the modes before it left: after Inductor's run, coil's GPT-2
    step held 408 MiB more free memory pinned in the ordinary pool than alone (3430 vs 3102 MiB
    reserved, the same 605 MiB live; bench/memory_probe.py, H100, 2026-11-26)."""
    from coil.bench.runner import _warm_peak

    for _ in range(ACCURACY_CALL - 1):  # to the replayed call
        step()
    return _warm_peak(step)


def new_process_first_call(case: str, mode: str, env: dict[str, str]
                           ) -> tuple[float | str, list[dict[str, Any]], dict[str, Any] | None, dict[str, Any]]:
    """`first_call` in a new process whose cache folders are `env`'s (empty: a cold compile;
    filled by an earlier call: a warm one): its seconds, for coil where each graph came from
    (`graph_caches`: name, graph cache, AOT cache, stage seconds), the warm peak of that
    process's own step (`own_process_peak`; None if it printed none), and what Dynamo did
    there (`dynamo_report`: graphs traced, Dynamo-cache counters). The process of a mode other
    than coil runs with COIL_PREHASH=0: it imports coil.backend too, whose hashing thread would
    otherwise give that mode's first call coil's head start."""
    cmd = [sys.executable, "-m", "coil.bench.models", case, mode]
    extra = {"TORCH_CACHING_PRECOMPILE": "1"} if precompile_requested() else {}
    base = knobs.environ() if mode == "coil" else knobs.environ(prehash=False)
    try:
        p = subprocess.run(cmd, env={**base, **env, **extra}, capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        return "timeout", [], None, {}
    seconds: float | str = f"failed (exit {p.returncode}): {p.stderr.strip()[-300:]}"
    caches: list[dict[str, Any]] = []
    peak: dict[str, Any] | None = None
    dynamo: dict[str, Any] = {}
    for line in p.stdout.splitlines():
        if line.startswith("first_call_s="):
            seconds = float(line.split("=", 1)[1])
        elif line.startswith("graph_caches="):
            caches = json.loads(line.split("=", 1)[1])
        elif line.startswith("warm_peak="):
            peak = json.loads(line.split("=", 1)[1])
        elif line.startswith("dynamo="):
            dynamo.update(json.loads(line.split("=", 1)[1]))
    return seconds, caches, peak, dynamo


def warm_starts(case: str, mode: str, env: dict[str, str]
                ) -> tuple[list[float | str], list[dict[str, Any]], dict[str, Any] | None, dict[str, Any]]:
    """`mode`'s warm first calls: `new_process_first_call` in `warm_runs()` new processes one
    after the other (one for eager, which compiles nothing), all on the cache folders `env`. The
    seconds (or failure) of each process, and the cache verdicts, own-process peak and Dynamo
    report of the first."""
    warm = [new_process_first_call(case, mode, env) for _ in range(1 if mode == "eager" else warm_runs())]
    _, caches, peak, dynamo = warm[0]
    return [w[0] for w in warm], caches, peak, dynamo


def dynamo_report() -> dict[str, Any]:
    """What Dynamo did in this process: how many graphs it traced, its Dynamo-cache counters
    (torch's caching precompile: hit, miss, error), and the seconds of its frame compiles split
    into `trace_s` (Dynamo's own work: tracing, guards, bytecode) and `backend_s` (the backend
    calls inside them: coil's or Inductor's compile, AOTAutograd and its cache included), from
    torch's `compilation_time_metrics` (absent from a torch that does not keep them); where it
    compiled under caching precompile without a package to load, `precompile_saved` from
    `save_package`."""
    from torch._dynamo.utils import compilation_time_metrics, counters

    out: dict[str, Any] = {"traced": counters["stats"]["unique_graphs"], "cache": dict(counters["dynamo_cache"])}
    frames = compilation_time_metrics.get("_compile.compile_inner")
    if frames:
        backend = sum(compilation_time_metrics.get("OutputGraph.call_user_compiler", []))
        out["trace_s"] = round(sum(frames) - backend, 3)
        out["backend_s"] = round(backend, 3)
    if "dynamo_cache_miss" in out["cache"]:
        out["precompile_saved"] = save_package()
    return out


def save_package() -> bool | str:
    """Save Dynamo's package (`torch.compiler.save_cache_artifacts`; called after the first call
    was timed): True, or what saving raised (torch cannot package every model)."""
    import torch

    try:
        torch.compiler.save_cache_artifacts()
        return True
    except Exception as e:
        return f"{type(e).__name__}: {e}"[:300]


def graph_caches() -> list[dict[str, Any]]:
    """Each graph coil compiled in this process: its name, its graph-, AOT- and frontend-cache
    verdicts and the seconds of each coil stage it went through (a warm start: runtime compile,
    load)."""
    from coil.backend.stats import COMPILED

    return [{"name": g.name, "graph_cache": str(g.graph_cache), "aot_cache": str(g.aot_cache),
             "frontend_cache": str(g.frontend_cache),
             "stage_s": {k: round(v, 3) for k, v in g.stage_times.items()}} for g in COMPILED]


def _split(case: str) -> tuple[ModelSpec, str]:
    for kind in ("infer_bf16", "train_amp"):
        if case.endswith("_" + kind):
            return SPECS[case[: -len(kind) - 1]], kind
    raise ValueError(f"not a model case: {case!r}")


def run_model(case: str, cold: Callable[[str], Any], modes: tuple[str, ...]) -> dict[str, Any]:
    """Measure one model case in every mode. `cold(tag)` is a context manager with empty caches
    that yields the cache environment (for the warm-compile process)."""
    import torch
    from coil.bench.runner import _bench, _coil_graphs, _warm_peak

    spec, kind = _split(case)
    base = _model(spec)
    inputs = spec.inputs(base)
    res: dict[str, Any] = {"kind": "model", "model": spec.describe, "tol": TOL}
    if kind == "infer_bf16":
        m16 = copy.deepcopy(base).to(torch.bfloat16).eval()
        ref = _infer_step(spec, copy.deepcopy(base).to(torch.float64), inputs)
        e_rmse = [_rmse(_infer_step(spec, m16, inputs), ref)]
        refs = [ref]
        res["dtype"] = "bf16"
    else:
        m64 = copy.deepcopy(base).to(torch.float64)
        refs = [_train_step(spec, m64, inputs, amp=False), *_grads(m64)]
        del m64
        e = copy.deepcopy(base)
        e_rmse = [_rmse(a, r) for a, r in zip([_train_step(spec, e, inputs), *_grads(e)], refs, strict=True)]
        del e
        res["dtype"] = "fp32 weights, autocast bf16"
        res["step"] = "zero_grad + forward + loss + backward (no optimizer)"
    res["tensors_checked"] = len(refs)
    # the references and the master copy of the model wait on the host, so that a mode's warm
    # peak counts its own model, its inputs and its work only: references kept on the device
    # (GPT-2: 1.4 GiB of fp64) also pinned free blocks of the ordinary pool (715 MiB measured
    # after coil's GPT-2 step, bench/memory_probe.py) that eager or Inductor allocations reuse but
    # a CUDA-graph pool cannot
    refs = [r.cpu() for r in refs]
    base.to("cpu")
    gc.collect()
    torch.cuda.empty_cache()
    m: Any = None
    for mode in modes:
        r: dict[str, Any] = {}
        try:
            if mode == "coil":
                import coil.backend as cb

                cb.reset()
            m = m16 if kind == "infer_bf16" else copy.deepcopy(base).to("cuda")
            with cold(f"{case}-{mode}") as env:
                # the cold and the warm first call in a new process each, timed alike (imports
                # included, `first_call`); eager's one process gives its own-process peak
                if mode != "eager":
                    cold_s, _, _, cold_dynamo = new_process_first_call(case, mode, env)
                    r["first_call_s"] = cold_s
                runs, caches, own_peak, warm_dynamo = warm_starts(case, mode, env)
                if mode == "eager":
                    r["first_call_s"] = runs[0]
                else:
                    r["warm_first_call_runs_s"] = runs
                    r["warm_first_call_s"] = warm_median(runs)
                    r["warm_cache_env"] = env  # to repeat the warm start by hand
                    r["dynamo_cold"], r["dynamo_warm"] = cold_dynamo, warm_dynamo
                if mode == "coil":
                    r["warm_graph_caches"] = caches
                # this process compiles from the caches the cold process filled
                r["in_process_first_call_s"], step, out = _compile_and_step(spec, kind, m, inputs, mode)
            for _ in range(ACCURACY_CALL - 1):  # check a replayed call, not the (eager) warm-up
                del out
                out = step()
            got = [out] if kind == "infer_bf16" else [out, *_grads(m)]
            ratios = [_rmse(a, b) / (MULTIPLIER * e + TOL / 10) for a, b, e in zip(got, refs, e_rmse, strict=True)]
            del got, out
            r["worst_ratio"] = max(ratios)
            r["failed_checks"] = [i for i, x in enumerate(ratios) if x > 1]
            r["accuracy_ok"] = not r["failed_checks"]
            r["ms"] = _bench(step, 20, 200)
            shared = _warm_peak(step)
            r["shared_process"] = shared
            if own_peak is None:
                r["peak_error"] = "the mode's own process printed no warm peak"
            else:
                r.update(own_peak)
            if mode == "coil":
                r["graphs"] = _coil_graphs()
            del step
        except Exception as exc:
            r["error"] = f"{type(exc).__name__}: {exc}"[:800]
            traceback.print_exc()
        _release(m)
        res[mode] = r
    return res


def _release(model: Any) -> None:
    """Free what one mode leaves behind before the next is measured: its gradients, and Dynamo's
    compiled code, whose AOTAutograd wrappers keep the compiled module's parameters (and with
    them their `.grad`) alive; without this a later mode's warm peak counted the earlier mode's
    model (GPT-2: ~950 MiB, measured on an H100)."""
    import gc

    import torch

    if isinstance(model, torch.nn.Module):
        model.zero_grad(set_to_none=True)
    torch._dynamo.reset()
    gc.collect()
    torch.cuda.empty_cache()


def run_model_in_process(case: str, root: Path, modes: tuple[str, ...]) -> dict[str, Any]:
    """`run_model` in a new process, one per case: eager, Inductor and coil still run side by side
    on the same inputs, but nothing an earlier case left behind (cached blocks, Dynamo code,
    CUDA-graph pools) is counted in this case's memory or time."""
    fd, name = tempfile.mkstemp(suffix=".json", dir=root)
    os.close(fd)
    cmd = [sys.executable, "-m", "coil.bench.models", "--case", case, str(root), ",".join(modes), name]
    try:
        p = subprocess.run(cmd, timeout=3600)
        code: object = p.returncode
    except subprocess.TimeoutExpired:
        code = "timeout"
    try:
        res: dict[str, Any] = json.loads(Path(name).read_text())
        return res
    except (OSError, ValueError):
        return {"kind": "model", "error": f"the case's process wrote no result (exit {code})"}


def main(argv: list[str]) -> int:
    """`python -m coil.bench.models CASE MODE`: print the first call's seconds, each coil
    graph's cache verdicts, what Dynamo did (`dynamo_report`) and the step's own-process warm
    peak (`own_process_peak`);
    `... --case CASE ROOT MODES OUT.json`: `run_model` for one case (modes comma-separated, cold
    caches under ROOT), its result written to OUT.json."""
    import coil.backend  # noqa: F401  (registers backend="coil")

    if argv[:1] == ["--case"]:
        from coil.bench.runner import _cold

        case, root, modes, out = argv[1:]
        res = run_model(case, functools.partial(_cold, Path(root)), tuple(modes.split(",")))
        Path(out).write_text(json.dumps(res, indent=2, default=str))
        return 0
    case, mode = argv

    seconds, step = first_call(case, mode)
    print(f"first_call_s={seconds}")
    print(f"graph_caches={json.dumps(graph_caches())}", flush=True)
    print(f"dynamo={json.dumps(dynamo_report())}", flush=True)
    print(f"warm_peak={json.dumps(own_process_peak(step))}")
    print(json.dumps({"case": case, "mode": mode}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
