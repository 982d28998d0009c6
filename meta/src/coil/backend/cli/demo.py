"""`coil demo`: compile a real model with backend="coil", run it, and report what happened.

On a CUDA machine: HF GPT-2 (GPT2LMHeadModel(GPT2Config()), random weights) in bf16. Without a
GPU: a small GPT-2 configuration in fp32, its kernels run by Triton's CPU interpreter, which
checks that coil compiles and computes correctly; its timings are the interpreter's (numpy
executing each kernel) and mean nothing for coil's speed, and the demo says so.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from coil.backend.stats import COMPILED, format_stage_times, reset, stage_totals

INTERPRETER_NOTE = ("note: on the CPU, Triton's interpreter runs coil's kernels: these timings are the "
                    "interpreter's and mean nothing for coil's speed (run the demo on a GPU for that)")


def _time(fn: Callable[[], Any], device: torch.device, reps: int) -> float:
    """Median seconds of `reps` calls after one warm-up (CUDA: synchronised)."""
    fn()
    times = []
    for _ in range(reps):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _model(device: torch.device) -> tuple[str, torch.nn.Module, torch.Tensor, torch.dtype]:
    from transformers import GPT2Config, GPT2LMHeadModel

    if device.type == "cuda":
        full: dict[str, Any] = {"attn_implementation": "eager"}
        cfg = GPT2Config(**full)
        batch, seq, dtype = 4, 512, torch.bfloat16
        label = "GPT2LMHeadModel(GPT2Config()) 124M, bf16, batch 4 x 512 tokens"
    else:
        small: dict[str, Any] = {"n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 512, "n_positions": 64,
                                 "bos_token_id": 0, "eos_token_id": 0, "attn_implementation": "eager"}
        cfg = GPT2Config(**small)
        batch, seq, dtype = 2, 16, torch.float32
        label = "GPT2LMHeadModel(2 layers, 64 wide), fp32, batch 2 x 16 tokens"
    torch.manual_seed(0)
    model: Any = GPT2LMHeadModel(cfg)
    model = model.to(device=device, dtype=dtype).eval()
    vocab: int = cfg.vocab_size
    ids = torch.randint(0, vocab, (batch, seq), device=device)
    return label, model, ids, dtype


def run_demo() -> int:
    """Run the demo; print the report; return an exit code (0: coil matched eager)."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    label, model, ids, dtype = _model(device)
    print(f"coil demo: {label}")
    print(f"device: {torch.cuda.get_device_name() if device.type == 'cuda' else 'CPU (Triton interpreter)'}; "
          f"torch {torch.__version__}")
    reset()
    torch._dynamo.reset()
    compiled: Any = torch.compile(model, backend="coil")
    with torch.no_grad():
        eager_out = model(ids).logits
        t0 = time.perf_counter()
        coil_out = compiled(ids).logits
        compile_s = time.perf_counter() - t0
        err = (coil_out.float() - eager_out.float()).abs().max().item()
        scale = eager_out.float().abs().max().item()
        reps = 10 if device.type == "cuda" else 2
        t_eager = _time(lambda: model(ids), device, reps)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        t_coil = _time(lambda: compiled(ids), device, reps)
        peak = torch.cuda.max_memory_allocated() if device.type == "cuda" else None
    kernels = sum(s.kernels for s in COMPILED)
    fused = sum(s.ops_fused for s in COMPILED)
    ir_ops = sum(s.ir_ops for s in COMPILED)
    fallbacks = sorted({f for s in COMPILED for f in s.fallbacks})
    eager_graphs = [s.name for s in COMPILED if s.eager_fallback]
    print(f"graphs compiled: {len(COMPILED)}; first call (compile + run): {compile_s:.1f} s")
    cache = ", ".join(sorted({s.graph_cache for s in COMPILED}))
    print(f"coil's compile stages (graph cache: {cache}): {format_stage_times(stage_totals(COMPILED))}")
    print(f"Triton kernels generated: {kernels} (from {ir_ops} pointwise/reduction ops: {fused} fused away)")
    print(f"extern calls: {sum(s.externs for s in COMPILED)}; ATen fallbacks: {', '.join(fallbacks) or 'none'}")
    if eager_graphs:
        print(f"graphs that fell back to eager after an error: {eager_graphs}")
    print(f"peak memory: {peak / 2**20:.1f} MiB" if peak is not None else "peak memory: n/a on CPU")
    print(f"max |coil - eager| over logits: {err:.3g} (max |logit| {scale:.3g})")
    print(f"eager: {t_eager * 1e3:.2f} ms   coil: {t_coil * 1e3:.2f} ms   speedup {t_eager / t_coil:.2f}x")
    if device.type != "cuda":
        print(INTERPRETER_NOTE)
    tol = 1e-3 if dtype == torch.float32 else 0.05 * max(scale, 1.0)
    ok = err <= tol and not eager_graphs
    print("result: OK" if ok else "result: MISMATCH")
    return 0 if ok else 1
