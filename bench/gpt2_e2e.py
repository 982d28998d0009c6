"""GPT-2 end to end on a GPU: eager vs coil, bf16 inference and one training step.

Accuracy follows the PyTorch benchmark harness's rule: with an fp64 reference (the same weights
upcast), RMSE(coil) <= 3 * RMSE(eager) + tol / 10, tol = 1e-2 for bf16, for every output
(logits; the loss and every gradient in training). Times are medians of CUDA-event timings
after warm-up (triton.testing.do_bench). Writes a JSON and a markdown table to the given folder.

    python bench/gpt2_e2e.py OUT_DIR
"""

from __future__ import annotations

import copy
import datetime
import json
import sys
import time
from pathlib import Path
from typing import Any

import coil.backend as cb
import torch
import triton
from transformers import GPT2Config, GPT2LMHeadModel

TOL = 1e-2


def rmse(a: torch.Tensor, ref: torch.Tensor) -> float:
    return float(torch.sqrt(torch.mean((a.double() - ref.double()) ** 2)))


def rmse_ok(res: torch.Tensor, eager: torch.Tensor, ref: torch.Tensor) -> tuple[bool, float, float]:
    r, e = rmse(res, ref), rmse(eager, ref)
    return r <= 3 * e + TOL / 10, r, e


def grads(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p.grad.detach().clone() for p in model.parameters() if p.grad is not None]


def main(out_dir: str) -> int:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    dev = torch.device("cuda")
    torch.manual_seed(0)
    cfg = GPT2Config(attn_implementation="eager")
    base = GPT2LMHeadModel(cfg).to(dev)
    batch, seq = 4, 512
    ids = torch.randint(0, cfg.vocab_size, (batch, seq), device=dev)
    report: dict[str, Any] = {
        "date": datetime.date.today().isoformat(), "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__, "triton": triton.__version__, "model": "GPT2LMHeadModel(GPT2Config())",
        "batch": batch, "seq": seq,
    }
    ok_all = True
    # ---------------- inference, bf16 ----------------
    m16 = copy.deepcopy(base).to(torch.bfloat16).eval()
    m64 = copy.deepcopy(m16).to(torch.float64).eval()
    with torch.no_grad():
        ref = m64(ids).logits
        eager = m16(ids).logits
        cb.reset()
        torch._dynamo.reset()
        t0 = time.perf_counter()
        cm = torch.compile(m16, backend="coil")
        res = cm(ids).logits
        torch.cuda.synchronize()
        compile_s = time.perf_counter() - t0
        ok, r, e = rmse_ok(res, eager, ref)
        t_e = triton.testing.do_bench(lambda: m16(ids), warmup=50, rep=300, return_mode="median")
        torch.cuda.reset_peak_memory_stats()
        t_c = triton.testing.do_bench(lambda: cm(ids), warmup=50, rep=300, return_mode="median")
        peak_c = torch.cuda.max_memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        m16(ids)
        peak_e = torch.cuda.max_memory_allocated()
    stats = [(s.name, s.kernels, s.ir_ops, s.externs, s.fallbacks, s.eager_fallback) for s in cb.COMPILED]
    report["inference"] = {"rmse_coil": r, "rmse_eager": e, "accuracy_ok": ok, "eager_ms": t_e, "coil_ms": t_c,
                           "speedup": t_e / t_c, "compile_s": compile_s, "peak_mib_eager": peak_e / 2**20,
                           "peak_mib_coil": peak_c / 2**20, "graphs": stats}
    ok_all &= ok and not any(s[5] for s in stats)
    print("inference", json.dumps(report["inference"], default=str)[:2000], flush=True)
    # ---------------- one training step, bf16 ----------------
    t16 = copy.deepcopy(base).to(torch.bfloat16).train()
    for mod in t16.modules():  # dropout off so all three runs compute the same function
        if isinstance(mod, torch.nn.Dropout):
            mod.p = 0.0
    t64 = copy.deepcopy(t16).to(torch.float64)
    tc = copy.deepcopy(t16)
    labels = ids

    def step(model: torch.nn.Module) -> torch.Tensor:
        model.zero_grad(set_to_none=True)
        loss = model(ids, labels=labels).loss
        loss.backward()
        return loss.detach()

    loss64 = step(t64)
    g64 = grads(t64)
    loss16 = step(t16)
    g16 = grads(t16)
    cb.reset()
    torch._dynamo.reset()
    ctc = torch.compile(tc, backend="coil")
    t0 = time.perf_counter()
    lossc = step(ctc)
    torch.cuda.synchronize()
    tcompile = time.perf_counter() - t0
    gc = grads(tc)
    checks = [rmse_ok(lossc, loss16, loss64)] + [rmse_ok(a, b, c) for a, b, c in zip(gc, g16, g64, strict=True)]
    bad = [i for i, c in enumerate(checks) if not c[0]]
    t_e = triton.testing.do_bench(lambda: step(t16), warmup=20, rep=200, return_mode="median")
    torch.cuda.reset_peak_memory_stats()
    t_c = triton.testing.do_bench(lambda: step(ctc), warmup=20, rep=200, return_mode="median")
    peak_c = torch.cuda.max_memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    step(t16)
    peak_e = torch.cuda.max_memory_allocated()
    stats = [(s.name, s.kernels, s.ir_ops, s.externs, s.fallbacks, s.eager_fallback) for s in cb.COMPILED]
    report["training"] = {"loss_fp64": float(loss64), "loss_eager": float(loss16), "loss_coil": float(lossc),
                          "tensors_checked": len(checks), "failed_checks": bad,
                          "worst_ratio": max(c[1] / (3 * c[2] + TOL / 10) for c in checks),
                          "eager_ms": t_e, "coil_ms": t_c, "speedup": t_e / t_c, "compile_s": tcompile,
                          "peak_mib_eager": peak_e / 2**20, "peak_mib_coil": peak_c / 2**20, "graphs": stats}
    ok_all &= not bad and not any(s[5] for s in stats)
    print("training", json.dumps(report["training"], default=str)[:2000], flush=True)
    (out / "gpt2_e2e.json").write_text(json.dumps(report, indent=2, default=str))
    lines = [
        f"GPT-2 (124M, random weights), batch {batch} x {seq}, bf16 — {report['date']}, {report['gpu']}, "
        f"torch {report['torch']}, Triton {report['triton']}",
        "",
        "| case | eager ms | coil ms | speedup | peak MiB eager | peak MiB coil | accuracy (RMSE rule) | first call s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for k in ("inference", "training"):
        d = report[k]
        acc = d.get("accuracy_ok", not d.get("failed_checks"))
        lines.append(f"| {k} | {d['eager_ms']:.2f} | {d['coil_ms']:.2f} | {d['speedup']:.2f}x | "
                     f"{d['peak_mib_eager']:.0f} | {d['peak_mib_coil']:.0f} | {'pass' if acc else 'FAIL'} | {d['compile_s']:.1f} |")
    (out / "gpt2_e2e.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "out"))
