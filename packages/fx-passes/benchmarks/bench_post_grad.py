"""Time the post-grad pipeline on a real HF GPT-2 inference graph (not a test).

Captures the inference graph the way coil's backend does (Dynamo -> AOTAutograd with coil's
decomposition table) and times ``run_post_grad_passes`` on it, with the verifier off (the
backend's default) and on (tests). Needs ``transformers`` and ``coil-lowering-ir``::

    .venv/bin/python packages/fx-passes/benchmarks/bench_post_grad.py --layers 12

Prints the op counts before/after, the number of fused attention nodes, the wall time of the
pipeline and the time spent in the pattern matcher (``fuse_attention``).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time
from collections import Counter
from typing import Any

import torch
from coil.fx_passes import knobs, run_post_grad_passes
from coil.lowering_ir import decomposition_table
from torch._functorch.aot_autograd import aot_module_simplified, make_boxed_func
from torch.fx import GraphModule


def _gpt2(layers: int) -> torch.nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(
        n_layer=layers, n_embd=128, n_head=4, vocab_size=512, n_positions=64,
        bos_token_id=0, eos_token_id=0, attn_implementation="eager",
    )  # fmt: skip
    return GPT2LMHeadModel(cfg).eval()


PASS_TIMES: Counter[str] = Counter()


def _time_passes() -> None:
    """Accumulate wall time per pass (wraps ``GraphPass.__call__``)."""
    from coil.fx_passes.infra import GraphPass, PassResult

    call = GraphPass.__call__

    def timed(self: GraphPass, gm: GraphModule) -> PassResult:
        t0 = time.perf_counter()
        try:
            return call(self, gm)
        finally:
            PASS_TIMES[self.name] += time.perf_counter() - t0

    GraphPass.__call__ = timed  # type: ignore[method-assign]


def _counts(gm: GraphModule) -> Counter[str]:
    return Counter(str(n.target) for n in gm.graph.nodes if n.op == "call_function")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--repeat", type=int, default=1, help="graphs captured and timed per mode")
    ap.add_argument("--modes", default="no-verify,verify", help="comma list: no-verify, verify")
    ap.add_argument("--profile", action="store_true", help="print the top of a cProfile")
    args = ap.parse_args()
    _time_passes()
    torch.manual_seed(0)
    model = _gpt2(args.layers)
    ids = torch.randint(0, 512, (2, 16))
    results: list[dict[str, Any]] = []

    def inference_compiler(gm: GraphModule, _example: Any) -> Any:
        mode = modes[len(results)]
        PASS_TIMES.clear()
        before = _counts(gm)
        prof = cProfile.Profile() if args.profile else None
        with knobs.override(verify=mode == "verify"):
            t0 = time.perf_counter()
            if prof is not None:
                prof.enable()
            run_post_grad_passes(gm, is_backward=False)
            if prof is not None:
                prof.disable()
            dt = time.perf_counter() - t0
        after = _counts(gm)
        sdpa = sum(v for k, v in after.items() if "scaled_dot_product" in k)
        results.append(
            {
                "mode": mode,
                "s": dt,
                "nodes": len(gm.graph.nodes),
                "sdpa": sdpa,
                "bmm_before": before["aten.bmm.default"],
                "bmm_after": after["aten.bmm.default"],
                "passes": dict(PASS_TIMES),
            }
        )
        if prof is not None:
            pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
        return make_boxed_func(gm.forward)

    def backend(gm: GraphModule, example_inputs: list[Any]) -> Any:
        return aot_module_simplified(
            gm, example_inputs, fw_compiler=inference_compiler,
            inference_compiler=inference_compiler, decompositions=decomposition_table(),
        )  # fmt: skip

    modes = args.modes.split(",") * args.repeat
    for _ in modes:
        torch._dynamo.reset()
        with torch.no_grad():
            out = torch.compile(model, backend=backend)(ids)
    with torch.no_grad():
        ref = model(ids)
    err = (out.logits - ref.logits).abs().max().item()
    print(f"torch {torch.__version__}; GPT-2 {args.layers} layers, inference graph")
    for r in results:
        print(
            f"  {r['mode']:>9}: post-grad passes {r['s']:.2f} s; nodes after {r['nodes']}; "
            f"fused attention {r['sdpa']}; bmm {r['bmm_before']} -> {r['bmm_after']}"
        )
        top = sorted(r["passes"].items(), key=lambda kv: -kv[1])
        print("      per pass (s, all rounds): " + ", ".join(f"{k} {v:.2f}" for k, v in top))
    print(f"  max |logits - eager| = {err:.2e}")


if __name__ == "__main__":
    main()
