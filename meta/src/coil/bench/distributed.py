"""Distributed training rows of `coil bench`: one recipe, one model, one mode per `torchrun`.

    torchrun --nproc-per-node N -m coil.bench.distributed --recipe ddp|fsdp2|fsdp2_tp \\
        --model gpt2|llama_style --mode eager|fp64|inductor|inductor_ro|coil|coil_nocg \\
        [--steps 10] [--batch 8] [--seq 1024] [--tiny] [--host-profile N] --out DIR
    python -m coil.bench.distributed --report DIR

One host: rank r runs on GPU r modulo the host's GPU count (NCCL), or on the CPU (gloo). Every
rank builds the model from one seed, dropout off, no KV cache (HF GPT-2, or the Llama-style 8-layer
model of `coil.bench.classic`; `--tiny`: 2 layers, width 64, vocab 128, for CPU tests), wraps it by the
recipe, and trains `--steps` steps of AdamW (not compiled; `zero_grad()` each step) on its own
fixed random tokens (seeded by rank, the same in every mode), under bf16 autocast on CUDA:

- `ddp`: `DistributedDataParallel` (DDPOptimizer splits the compiled graph at bucket bounds);
- `fsdp2`: `fully_shard` on every transformer block, then on the root, over all ranks;
- `fsdp2_tp`: a 2-D mesh (N/2 data-parallel x 2 tensor-parallel; Llama-style only): attention's
  q/k/v and the MLP's gate/up column-parallel, o and down row-parallel (`parallelize_module`),
  then `fully_shard` over the data-parallel dimension.

Modes: `eager`, `fp64` (eager in float64 without autocast: the accuracy reference), and the
bench's compiled modes (`coil.bench.measure.compile_mode`): `inductor` (`torch.compile(model)`),
`inductor_ro` (`mode="reduce-overhead"`: CUDA graphs, coil's peer), `coil` (`backend="coil"`),
`coil_nocg` (coil without CUDA graphs, Inductor default's peer). Each rank writes
`<out>/<recipe>-<model>-<mode>-rank<r>.json`:

- the losses, the first step's seconds (compile included), the median and the mean of the later
  steps' wall time (synchronised);
- peak reserved and allocated memory (MiB) over the steps after the second (the cache emptied
  first, as the bench's `warm_peak`: compiling, autotuning and CUDA-graph captures not counted);
- on CUDA, over `--profile-steps` more steps under torch's profiler (`coil.bench.comm_overlap`):
  the collective kernels' time a step and the share of it hidden behind compute kernels, the
  time some kernel runs (GPU busy) and some compute kernel runs (a collective kernel waiting for
  a slower rank counts as busy; a step much longer than its compute is host- or wait-bound);
- the graphs Dynamo made; under coil, the graphs coil compiled, ran eagerly after an error and
  the ATen fallbacks they hold (`coil.bench.measure.coil_counts`), and on CUDA its CUDA graphs:
  captured, stopped, and the calls run without them (`coil.bench.measure.cuda_graph_counts`);
- the device and the versions, or the error that stopped it (a row, never a stopped sweep).

`--report DIR` prints one table per recipe and model: per mode, the slowest rank's median step,
the largest rank's reserved peak, first-step seconds, and the accuracy rule of `coil.bench.steps`
on the losses (`ratios`: RMSE(mode, fp64) over MULTIPLIER * RMSE(eager, fp64) + TOL / 10, at
most 1 passes; needs the fp64 and eager rows; HF computes the loss in float32 even for a float64
model). The collectives' and the graph counts' columns are rank 0's.

`--host-profile N`: every rank then runs N more steps under cProfile (the collectives need all
of them), and rank 0 prints the functions where the host spends its time, with coil's runtime logging at INFO (why a call ran without its CUDA
graph) and its CUDA-graph runners one line each: for a step longer than its GPU busy time.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from coil.bench.classic import no_dropout
from coil.bench.measure import (
    coil_counts,
    coil_graphs,
    compile_mode,
    cuda_graph_counts,
    dynamo_graphs,
    is_coil,
    mark_step,
    runner_lines,
)

__all__ = ["MODELS", "MODES", "RECIPES", "blocks", "build_model", "compiled", "main", "report", "run", "train",
           "wrap"]

RECIPES = ("ddp", "fsdp2", "fsdp2_tp")
MODELS = ("gpt2", "llama_style")
MODES = ("eager", "fp64", "inductor", "inductor_ro", "coil", "coil_nocg")


def build_model(name: str, tiny: bool) -> Any:
    """The model, fp32, on the CPU, from the current seed, dropout off (`classic.no_dropout`)."""
    model = _model(name, tiny)
    no_dropout(model)
    return model


def _model(name: str, tiny: bool) -> Any:
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    # no KV cache, as in the zoo: a training step does not generate, and the cache's per-layer
    # guards would recompile each block's frame under FSDP2 until Dynamo's limit
    if name == "gpt2":
        small: dict[str, Any] = {"n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 128, "n_positions": 64,
                                 "bos_token_id": 0, "eos_token_id": 0}
        return GPT2LMHeadModel(GPT2Config(**(small if tiny else {}), use_cache=False))
    if name == "llama_style":
        size: dict[str, Any] = (
            {"vocab_size": 128, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
             "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64}
            if tiny else
            {"vocab_size": 32000, "hidden_size": 1024, "intermediate_size": 2816, "num_hidden_layers": 8,
             "num_attention_heads": 16, "num_key_value_heads": 8, "max_position_embeddings": 1024})
        return LlamaForCausalLM(LlamaConfig(**size, use_cache=False))
    raise ValueError(f"unknown model {name!r}; expected one of {MODELS}")


def blocks(model: Any) -> list[Any]:
    """The transformer blocks of a GPT-2 or Llama model."""
    inner = getattr(model, "transformer", None) or model.model
    return list(inner.h if hasattr(inner, "h") else inner.layers)


def wrap(model: Any, recipe: str, model_name: str, device: Any, world: int) -> Any:
    """`model` (on `device`) wrapped by `recipe` over the `world` ranks."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    kind = device.type
    if recipe == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(model, device_ids=[device.index] if kind == "cuda" else None)
    if recipe == "fsdp2":
        mesh = init_device_mesh(kind, (world,))
        for block in blocks(model):
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
        return model
    if recipe == "fsdp2_tp":
        if model_name != "llama_style" or world % 2:
            raise ValueError("fsdp2_tp: the Llama-style model on an even number of ranks")
        from torch.distributed.tensor.parallel import (
            ColwiseParallel,
            RowwiseParallel,
            parallelize_module,
        )

        mesh = init_device_mesh(kind, (world // 2, 2), mesh_dim_names=("dp", "tp"))
        plan = {"self_attn.q_proj": ColwiseParallel(), "self_attn.k_proj": ColwiseParallel(),
                "self_attn.v_proj": ColwiseParallel(), "self_attn.o_proj": RowwiseParallel(),
                "mlp.gate_proj": ColwiseParallel(), "mlp.up_proj": ColwiseParallel(),
                "mlp.down_proj": RowwiseParallel()}
        for block in blocks(model):
            parallelize_module(block, mesh["tp"], plan)
        for block in blocks(model):
            fully_shard(block, mesh=mesh["dp"])
        fully_shard(model, mesh=mesh["dp"])
        return model
    raise ValueError(f"unknown recipe {recipe!r}; expected one of {RECIPES}")


def compiled(model: Any, mode: str) -> Any:
    """`model` as `mode` runs it: fp64 and eager as it is, the others as the bench's modes of the
    same name compile it (`coil.bench.measure.compile_mode`)."""
    if mode in ("eager", "fp64"):
        return model
    if is_coil(mode):
        import coil.backend  # noqa: F401  (registers backend="coil")
    return compile_mode(model, mode)


def train(args: argparse.Namespace, rank: int, world: int, device: Any) -> dict[str, Any]:
    """One mode's run on this rank (see the module docstring); the figures."""
    import torch

    torch.manual_seed(0)
    model = build_model(args.model, args.tiny)
    dtype = torch.float64 if args.mode == "fp64" else torch.float32
    model = model.to(device=device, dtype=dtype)
    model = wrap(model, args.recipe, args.model, device, world)
    step_model = compiled(model, args.mode)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    vocab = 128 if args.tiny else (50257 if args.model == "gpt2" else 32000)
    gen = torch.Generator().manual_seed(1000 + rank)
    ids = torch.randint(0, vocab, (args.batch, args.seq), generator=gen).to(device)
    autocast = device.type == "cuda" and args.mode != "fp64"

    def step() -> float:
        mark_step(args.mode)
        opt.zero_grad()
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
            loss = step_model(ids, labels=ids).loss
        loss.backward()
        opt.step()
        return float(loss.detach())

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    losses: list[float] = []
    times: list[float] = []
    for i in range(args.steps):
        sync()
        t0 = time.perf_counter()
        losses.append(step())
        sync()
        times.append(time.perf_counter() - t0)
        if device.type == "cuda" and i == min(1, args.steps - 1):
            # memory of warm steps, as the bench's warm_peak: what compiling, autotuning and the
            # CUDA-graph capture (second step) left cached in the allocator is released first
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(device)
    later = times[1:] or times
    out: dict[str, Any] = {"losses": losses, "first_s": times[0], "median_ms": 1e3 * statistics.median(later),
                           "mean_ms": 1e3 * statistics.fmean(later)}
    out["dynamo_graphs"] = dynamo_graphs()
    if is_coil(args.mode):
        out.update(coil_counts(coil_graphs()))
        if device.type == "cuda":
            out.update(cuda_graph_counts())
    if device.type == "cuda":
        out["reserved_mib"] = torch.cuda.max_memory_reserved(device) / 2**20
        out["allocated_mib"] = torch.cuda.max_memory_allocated(device) / 2**20
        if args.profile_steps > 0:
            out.update(_profiled(step, sync, args.profile_steps))
    if args.host_profile > 0:  # every rank steps (the collectives need all), rank 0 prints
        _host_profile(step, sync, args.host_profile, is_coil(args.mode) and device.type == "cuda", rank == 0)
    return out


def _host_profile(step: Any, sync: Any, steps: int, coil: bool, show: bool) -> None:
    """`--host-profile`: `steps` more steps under cProfile; with `show`, the top functions by own
    time printed (where the host spends a step), then (`coil`) its CUDA-graph runners one line each."""
    import cProfile
    import io
    import pstats

    prof = cProfile.Profile()
    sync()
    prof.enable()
    for _ in range(steps):
        step()
    sync()
    prof.disable()
    if not show:
        return
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(40)
    print(f"=== cProfile of {steps} steps on rank 0 (totals over the steps)\n{buf.getvalue()}")
    if coil:
        lines = runner_lines()
        print(f"=== {len(lines)} CUDA-graph runners on rank 0", *lines, sep="\n  ")


def _profiled(step: Any, sync: Any, steps: int) -> dict[str, Any]:
    """Collective kernel time a step and the share of it hidden behind compute
    (`coil.bench.comm_overlap`), over `steps` more steps under torch's profiler."""
    from coil.bench.comm_overlap import hidden_fraction, kernel_intervals, length, union
    from torch.profiler import ProfilerActivity, profile

    sync()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        sync()
    comm, compute = kernel_intervals(prof.events())
    return {"collective_ms": length(union(comm)) / 1e3 / steps, "hidden": hidden_fraction(comm, compute),
            "busy_ms": length(union(comm + compute)) / 1e3 / steps, "compute_ms": length(union(compute)) / 1e3 / steps}


def run(args: argparse.Namespace) -> int:
    """This rank's part of a `torchrun` launch: train, write its JSON (an error is a row)."""
    import torch
    import torch.distributed as dist

    cuda = torch.cuda.is_available() and not args.cpu
    dist.init_process_group("nccl" if cuda else "gloo")  # torchrun's environment says who is who
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", rank % torch.cuda.device_count()) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    row: dict[str, Any] = {"recipe": args.recipe, "model": args.model, "mode": args.mode, "rank": rank,
                           "world": world, "batch": args.batch, "seq": args.seq, "tiny": args.tiny,
                           "device": torch.cuda.get_device_name(device) if cuda else platform.processor() or "cpu",
                           "torch": torch.__version__}
    try:
        import triton

        row["triton"] = triton.__version__
    except ImportError:
        pass
    try:
        row.update(train(args, rank, world, device))
    except Exception as exc:  # a row with its error, never a stopped sweep
        row["error"] = f"{type(exc).__name__}: {exc}"
        traceback.print_exc()
    finally:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{args.recipe}-{args.model}-{args.mode}-rank{rank}.json").write_text(json.dumps(row, indent=1))
        dist.destroy_process_group()
    return 0


def report(folder: Path) -> str:
    """The tables of `--report` (see the module docstring) as markdown."""
    import torch
    from coil.bench.steps import ratios, rmse

    rows = [json.loads(p.read_text()) for p in sorted(folder.glob("*-rank*.json"))]
    groups: dict[tuple[str, str], dict[str, list[dict[str, Any]]]] = {}
    for r in rows:
        groups.setdefault((r["recipe"], r["model"]), {}).setdefault(r["mode"], []).append(r)
    lines: list[str] = []
    for (recipe, model), modes in groups.items():
        first = next(iter(modes.values()))[0]
        lines += [f"### {recipe}, {model}: {first['world']} ranks, batch {first['batch']} x {first['seq']} a rank, "
                  f"{first['device']}, torch {first['torch']}, Triton {first.get('triton', '-')}", "",
                  "| mode | median step ms (slowest rank) | reserved MiB (largest rank) | first step s | "
                  "collectives ms a step, hidden; GPU busy ms a step (compute kernels alone) (rank 0) | loss RMSE, over the rule's bound | "
                  "Dynamo graphs; coil's compiled / eager / ATen fallbacks; its CUDA graphs (rank 0) |",
                  "|---|---|---|---|---|---|---|"]
        ref = modes.get("fp64", [{}])[0].get("losses")
        eager = modes.get("eager", [{}])[0].get("losses")
        for mode in MODES:
            ranks = modes.get(mode)
            if not ranks:
                continue
            errors = [r["error"] for r in ranks if "error" in r]
            if errors:
                lines.append(f"| {mode} | error: {errors[0][:120]} | | | | | |")
                continue
            median = max(r["median_ms"] for r in ranks)
            reserved = max(r.get("reserved_mib", 0.0) for r in ranks)
            first_s = max(r["first_s"] for r in ranks)
            rule = "-"
            if ref is not None and eager is not None and mode != "fp64":
                got, want = torch.tensor(ranks[0]["losses"]), torch.tensor(ref, dtype=torch.float64)
                (ratio,) = ratios([got], [want], [rmse(torch.tensor(eager), want)])
                rule = f"{rmse(got, want):.2e}, {ratio:.2f} ({'pass' if ratio <= 1 else 'FAIL'})"
            r0 = ranks[0]
            hidden = r0.get("hidden")
            comm = (f"{r0['collective_ms']:.2f}, {100 * hidden:.0f} %" if hidden is not None
                    else "-" if "collective_ms" not in r0 else f"{r0['collective_ms']:.2f}, -")
            if "busy_ms" in r0:
                comm += f"; {r0['busy_ms']:.2f}" + (f" ({r0['compute_ms']:.2f})" if "compute_ms" in r0 else "")
            graphs = str(r0.get("dynamo_graphs", "-"))
            if "graphs_compiled" in r0:
                graphs += f"; {r0['graphs_compiled']} / {r0['graphs_eager']} / {r0['aten_fallbacks']}"
            if "cuda_graphs" in r0:
                graphs += (f"; CUDA graphs {r0['cuda_graphs']} ({r0['cuda_graphs_stopped']} stopped, "
                           f"{r0['uncaptured_calls']} calls uncaptured)")
            lines.append(f"| {mode} | {median:.2f} | {reserved:.0f} | {first_s:.1f} | {comm} | {rule} | {graphs} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """The command line (see the module docstring)."""
    ap = argparse.ArgumentParser(prog="python -m coil.bench.distributed", description=__doc__.split("\n")[0])
    ap.add_argument("--recipe", choices=RECIPES)
    ap.add_argument("--model", choices=MODELS)
    ap.add_argument("--mode", choices=MODES)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--tiny", action="store_true", help="2-layer, 64-wide models (CPU tests)")
    ap.add_argument("--profile-steps", type=int, default=3, metavar="N",
                    help="CUDA: profile N more steps for the collectives' time and the share hidden (0: none)")
    ap.add_argument("--host-profile", type=int, default=0, metavar="N",
                    help="every rank runs N more steps under cProfile; rank 0 prints where the host's time goes, "
                         "with coil's runtime logging at INFO and its CUDA-graph runners listed")
    ap.add_argument("--cpu", action="store_true", help="gloo on the CPU even where CUDA is present")
    ap.add_argument("--out", default="bench-out/distributed")
    ap.add_argument("--report", type=Path, default=None, metavar="DIR", help="print the tables of DIR's rows")
    args = ap.parse_args(argv)
    if args.report is not None:
        print(report(args.report))
        return 0
    if not (args.recipe and args.model and args.mode):
        ap.error("--recipe, --model and --mode are required (or --report DIR)")
    if args.steps < 2:
        ap.error("--steps: at least 2 (the first step compiles)")
    if args.host_profile > 0:
        import logging

        logging.basicConfig(format="%(name)s %(levelname)s: %(message)s")
        logging.getLogger("coil.runtime").setLevel(logging.INFO)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())

