"""Where the GPU time goes: Inductor vs coil on one model, kernel by kernel (torch.profiler).

    python bench/profile_model.py OUT_DIR [gpt2_infer|gpt2_train] [--top N]

For each compiler: compile, warm up, profile 5 iterations; prints per-iteration wall time, the
number of kernel launches and their summed GPU time, and the top kernels by GPU time. The coil
run also writes its debug folder (COIL_DEBUG_DIR) under OUT_DIR/coil-debug.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

ITERS = 5


def _model(kind: str) -> tuple[Any, Any]:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(attn_implementation="eager")
    m = GPT2LMHeadModel(cfg).cuda()
    ids = torch.randint(0, cfg.vocab_size, (4, 512), device="cuda")
    if kind == "gpt2_infer":
        m = m.to(torch.bfloat16).eval()

        def infer(model: Any) -> Any:
            with torch.no_grad():
                return model(ids).logits
        return m, infer

    def train(model: Any) -> Any:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(ids, labels=ids).loss
        loss.backward()
        return loss
    return m, train


def profile_one(name: str, step: Any, model: Any, out: Path, top: int) -> None:
    for _ in range(3):
        step(model)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(10):
        step(model)
    torch.cuda.synchronize()
    wall = (time.perf_counter() - t0) / 10 * 1e3
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(ITERS):
            step(model)
        torch.cuda.synchronize()
    evs = [e for e in prof.key_averages() if e.device_time_total > 0]
    launches = sum(e.count for e in evs) / ITERS
    gpu = sum(e.self_device_time_total for e in evs) / ITERS / 1e3
    print(f"\n=== {name}: wall {wall:.2f} ms/iter, {launches:.0f} kernels/iter, GPU busy {gpu:.2f} ms/iter")
    evs.sort(key=lambda e: -e.self_device_time_total)
    for e in evs[:top]:
        print(f"{e.self_device_time_total / ITERS / 1e3:8.3f} ms {e.count // ITERS:4d}x  {e.key[:110]}")
    (out / f"{name}.txt").write_text(prof.key_averages().table(sort_by="self_device_time_total", row_limit=200))


def main() -> None:
    out = Path(sys.argv[1])
    kind = sys.argv[2] if len(sys.argv) > 2 else "gpt2_infer"
    top = int(sys.argv[sys.argv.index("--top") + 1]) if "--top" in sys.argv else 30
    out.mkdir(parents=True, exist_ok=True)
    model, step = _model(kind)
    for comp in ("inductor", "coil"):
        torch._dynamo.reset()
        if comp == "coil":
            os.environ["COIL_DEBUG_DIR"] = str(out / f"{kind}-coil-debug")
            cm = torch.compile(model, backend="coil")
        else:
            cm = torch.compile(model)
        t0 = time.perf_counter()
        step(cm)
        torch.cuda.synchronize()
        print(f"{comp}: first call {time.perf_counter() - t0:.1f} s")
        os.environ.pop("COIL_DEBUG_DIR", None)
        profile_one(f"{kind}-{comp}", step, cm, out, top)


if __name__ == "__main__":
    main()
