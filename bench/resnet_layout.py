"""ResNet-50 under coil with and without channels-last layouts (COIL_CHANNELS_LAST=0/1), on a GPU.

    python bench/resnet_layout.py [--modes coil,inductor,eager] [--cases infer,train] [--out DIR]

Cases as `coil bench` measures them (coil.backend.bench_models): torchvision resnet50, batch 32 x
3 x 224 x 224, random weights (seed 0):
  infer: the model in bf16, eval(), no_grad;
  train: one AMP step (fp32 weights, autocast bf16, cross-entropy loss, backward, no optimizer).
For each case and mode (coil twice: COIL_CHANNELS_LAST=0 and =1) it prints the median ms
(triton.testing.do_bench), the worst accuracy ratio against an fp64 reference (the harness rule:
<= 1 passes), and for coil the kernels, externs and the layout conversions the channels-last pass
added: kernels made only of its `clone_default*` nodes (standalone conversions) and kernels where
such a clone is fused into a producer. A first check compares cuDNN's real output strides of a
channels-last bf16 convolution (and its backward) with what FakeTensor propagation claims: coil's
wrapper trusts the extern's layout, so a mismatch there would be a bug to report.
Writes resnet_layout.json to --out (default: current folder).
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import os
import sys
import time
from pathlib import Path
from typing import Any


def _conv_layout_check() -> dict[str, Any]:
    """Real vs fake strides of cuDNN bf16 convolutions with channels-last operands."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    aten = torch.ops.aten
    cl = torch.channels_last

    def run(x: Any, w: Any, g: Any) -> list[tuple[int, ...]]:
        y = aten.convolution(x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
        gi, gw, _ = aten.convolution_backward(g, x, w, [0], [1, 1], [1, 1], [1, 1], False, [0, 0], 1,
                                              [True, True, False])
        return [tuple(y.stride()), tuple(gi.stride()), tuple(gw.stride())]

    out: dict[str, Any] = {}
    for name, shape, wshape in (("3x3", (8, 64, 28, 28), (64, 64, 3, 3)), ("1x1", (8, 256, 14, 14), (64, 256, 1, 1)),
                                ("stem", (8, 3, 56, 56), (64, 3, 3, 3))):
        x = torch.randn(shape, device="cuda", dtype=torch.bfloat16).to(memory_format=cl)
        w = torch.randn(wshape, device="cuda", dtype=torch.bfloat16).to(memory_format=cl)
        g = torch.randn(shape[0], wshape[0], shape[2], shape[3], device="cuda", dtype=torch.bfloat16).to(memory_format=cl)
        real = run(x, w, g)
        with FakeTensorMode() as mode:
            fake = run(mode.from_tensor(x), mode.from_tensor(w), mode.from_tensor(g))
        out[name] = {"real": real, "fake": fake, "agree": real == fake}
    return out


def _rmse(a: Any, ref: Any) -> float:
    import torch

    return float(torch.sqrt(torch.mean((a.detach().double() - ref.double()) ** 2)))


def _conversions(graphs: list[Any]) -> dict[str, int]:
    standalone = fused = 0
    for g in graphs:
        for origins in g.kernel_origins:
            mine = [o for o in origins if o.startswith("clone_default")]
            if mine and len(mine) == len(origins):
                standalone += 1
            elif mine:
                fused += 1
    return {"standalone": standalone, "fused_into_producer": fused}


def _measure(case: str, mode: str, channels_last: str | None) -> dict[str, Any]:
    import torch
    import torch._dynamo
    from coil.backend.bench import _bench, _warm_peak
    from coil.backend.bench_models import (
        MULTIPLIER,
        SPECS,
        TOL,
        _grads,
        _infer_step,
        _model,
        _train_step,
        compile_mode,
    )

    if channels_last is None:
        os.environ.pop("COIL_CHANNELS_LAST", None)
    else:
        os.environ["COIL_CHANNELS_LAST"] = channels_last
    spec = SPECS["resnet50"]
    torch._dynamo.reset()
    if mode == "coil":
        import coil.backend as cb

        cb.reset()
    base = _model(spec)
    inputs = spec.inputs(base)
    r: dict[str, Any] = {"case": case, "mode": mode, "COIL_CHANNELS_LAST": channels_last}
    if case == "infer":
        m = copy.deepcopy(base).to(torch.bfloat16).eval()
        ref = [_infer_step(spec, copy.deepcopy(base).to(torch.float64), inputs)]
        eager = [_infer_step(spec, m, inputs)]
        f = compile_mode(m, mode)
        step = functools.partial(_infer_step, spec, f, inputs)
    else:
        m64 = copy.deepcopy(base).to(torch.float64)
        ref = [_train_step(spec, m64, inputs, amp=False), *_grads(m64)]
        del m64
        e = copy.deepcopy(base)
        eager = [_train_step(spec, e, inputs), *_grads(e)]
        del e
        m = copy.deepcopy(base)
        f = compile_mode(m, mode)
        step = functools.partial(_train_step, spec, f, inputs)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = step()
    torch.cuda.synchronize()
    r["first_call_s"] = round(time.perf_counter() - t0, 1)
    got = [out] if case == "infer" else [out, *_grads(m)]
    ratios = [_rmse(a, b) / (MULTIPLIER * _rmse(e, b) + TOL / 10) for a, b, e in zip(got, ref, eager, strict=True)]
    r["worst_ratio"] = round(max(ratios), 3)
    r["ms"] = round(_bench(step, 20, 200), 3)
    r["peak_mib"] = round(_warm_peak(step)["peak_mib"], 1)
    if mode == "coil":
        import coil.backend as cb

        graphs = list(cb.COMPILED)
        r["graphs"] = [{"name": g.name, "kernels": g.kernels, "externs": g.externs, "fallbacks": g.fallbacks,
                        "eager_fallback": g.eager_fallback} for g in graphs]
        r["conversion_kernels"] = _conversions(graphs)
    return r


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modes", default="coil,inductor,eager")
    ap.add_argument("--cases", default="infer,train")
    ap.add_argument("--out", default=".")
    args = ap.parse_args(argv)
    import coil.backend  # noqa: F401  (registers backend="coil")
    import torch
    import triton

    print(f"torch {torch.__version__}, triton {triton.__version__}, {torch.cuda.get_device_name()}", flush=True)
    results: dict[str, Any] = {"conv_layout_check": _conv_layout_check(), "runs": []}
    for name, check in results["conv_layout_check"].items():
        print(f"cuDNN layout vs FakeTensor, {name}: {'agree' if check['agree'] else 'DIFFER'} {check}", flush=True)
    for case in args.cases.split(","):
        for mode in args.modes.split(","):
            settings: list[str | None] = ["0", "1"] if mode == "coil" else [None]
            for setting in settings:
                try:
                    r = _measure(case, mode, setting)
                except Exception as e:  # report and go on with the other settings
                    r = {"case": case, "mode": mode, "COIL_CHANNELS_LAST": setting, "error": f"{type(e).__name__}: {e}"[:600]}
                results["runs"].append(r)
                label = mode if setting is None else f"{mode} COIL_CHANNELS_LAST={setting}"
                if "error" in r:
                    print(f"{case:5s} {label:28s} ERROR {r['error']}", flush=True)
                else:
                    extra = ""
                    if mode == "coil":
                        kernels = sum(g["kernels"] for g in r["graphs"])
                        extra = f"  kernels {kernels}, conversions {r['conversion_kernels']}"
                    print(f"{case:5s} {label:28s} {r['ms']:8.3f} ms  ratio {r['worst_ratio']:.3f}  "
                          f"peak {r['peak_mib']:.0f} MiB  first call {r['first_call_s']} s{extra}", flush=True)
                torch.cuda.empty_cache()
    out = Path(args.out) / "resnet_layout.json"
    out.write_text(json.dumps(results, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
