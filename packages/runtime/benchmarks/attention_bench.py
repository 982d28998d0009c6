"""coil's attention op against SDPA and FlexAttention on a GPU, and the winning tile configuration
per case: what the configuration rule of `coil.runtime.attention_config` is set from.

Run on the device machine (packages/runtime/README.md, "Attention"):

    python3 packages/runtime/benchmarks/attention_bench.py [--cases padding_keep,causal,...]
        [--passes fwd,fwdbwd] [--quick] [--no-flex] [--json out.json]

Cases (bf16, the shapes of the README's bench list): padding (B16 H12 S512 D64, key lengths
S/2..S, as a bool keep mask and as HF's additive mask with bf16's lowest value), unmasked (same
sizes), causal (B4 H12 S4096 D64), causal with a 1024-key window (B2 H12 S8192 D64), causal
with ALiBi (B4 H16 S2048 D64), causal GQA (B4, 32 query / 8 key-value heads, S2048 D128).

For each case and pass (forward; forward + backward), timed with `triton.testing.do_bench`
(median, milliseconds):
- coil under every candidate of FORWARD_CANDIDATES (forward; the kernels launched directly) and
  of BACKWARD_CANDIDATES (forward + backward: the rule's forward, then the candidate backward),
  the rule's own choice (`rule`), for masked cases also with SKIP_TILES (`rule+skip`), and the
  op itself through autograd (`op`);
- SDPA (torch.nn.functional.scaled_dot_product_attention) with the equivalent mask: is_causal
  where it is one, else a bool or additive mask tensor;
- FlexAttention compiled by Inductor (block mask + score_mod), unless --no-flex or missing.
TFLOP/s count the matrix products of visible (query, key) pairs only (4 * D flops a pair
forward, 2.5 times that backward). A candidate that fails (out of shared memory) is listed as
failed. After the tables: each case's fastest coil configuration, and the largest absolute
difference of coil's output (and, for forward + backward, of dq, dk, dv) from SDPA's.

--quick times only the rule, `op`, SDPA and Flex (no candidate sweep).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
import triton.testing
from coil.runtime import attention_launch
from coil.runtime.attention import OPS
from coil.runtime.attention_config import (
    BACKWARD_CANDIDATES,
    FORWARD_CANDIDATES,
    AttentionVariant,
    TileConfig,
    backward_config,
    forward_config,
)

DTYPE = torch.bfloat16


@dataclass(frozen=True)
class Case:
    """One bench shape: sizes and score modifications."""

    name: str
    batch: int
    heads: int
    kv_heads: int
    seq: int
    d: int
    causal: bool = False
    window: int = 0
    alibi: bool = False
    padding: str | None = None  # "keep" (bool mask) or "bias" (HF's additive mask)


CASES = (
    Case("padding_keep", 16, 12, 12, 512, 64, padding="keep"),
    Case("padding_bias", 16, 12, 12, 512, 64, padding="bias"),
    Case("unmasked", 16, 12, 12, 512, 64),
    Case("causal", 4, 12, 12, 4096, 64, causal=True),
    Case("window", 2, 12, 12, 8192, 64, causal=True, window=1024),
    Case("alibi", 4, 16, 16, 2048, 64, causal=True, alibi=True),
    Case("gqa", 4, 32, 8, 2048, 128, causal=True),
)


@dataclass
class Inputs:
    """One case's tensors, coil's arguments and SDPA's/Flex's equivalents."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    grad: torch.Tensor
    coil_args: tuple[Any, ...]  # (bias, keep, alibi, scale, causal, window, softcap)
    sdpa_mask: torch.Tensor | None
    visible: float  # visible (query, key) pairs over the batch and heads


def make_inputs(case: Case, device: torch.device) -> Inputs:
    gen = torch.Generator(device="cpu").manual_seed(0)
    b, h, hk, s, d = case.batch, case.heads, case.kv_heads, case.seq, case.d

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen).to(device, DTYPE)

    q, k, v = randn(b, h, s, d), randn(b, hk, s, d), randn(b, hk, s, d)
    i = torch.arange(s, device=device)[:, None]
    j = torch.arange(s, device=device)[None, :]
    allowed = torch.ones(s, s, dtype=torch.bool, device=device)
    if case.causal:
        allowed &= j <= i
    if case.window:
        allowed &= j > i - case.window
    bias = keep = alibi = None
    sdpa_mask: torch.Tensor | None = None
    visible = float(allowed.sum()) * b * h
    if case.padding is not None:
        lengths = torch.linspace(s // 2, s, b).round().long().to(device)
        keep_b = (torch.arange(s, device=device)[None, :] < lengths[:, None])[:, None, None, :]
        visible = float((allowed & keep_b).sum()) * h
        sdpa_mask = keep_b
        if case.padding == "keep":
            keep = keep_b
        else:
            low = torch.finfo(DTYPE).min
            bias = torch.zeros(b, 1, 1, s, device=device, dtype=DTYPE).masked_fill(~keep_b, low)
    elif case.alibi:
        alibi = torch.tensor([2.0 ** (-8.0 * (x + 1) / h) for x in range(h)], device=device)
        slope = (alibi[:, None, None] * (j - i).float()).to(DTYPE)
        sdpa_mask = slope.masked_fill(~allowed, float("-inf"))[None]
    elif case.window:
        sdpa_mask = allowed
    scale = d ** -0.5
    coil_args = (bias, keep, alibi, scale, case.causal, case.window, 0.0)
    return Inputs(q, k, v, randn(b, h, s, d), coil_args, sdpa_mask, visible)


def _sdpa(case: Case, x: Inputs) -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor],
                                               torch.Tensor]:
    is_causal = case.causal and x.sdpa_mask is None
    gqa = case.heads != case.kv_heads

    def run(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=x.sdpa_mask, is_causal=is_causal,
                                              scale=case.d ** -0.5, enable_gqa=gqa)

    return run


def _flex(case: Case, x: Inputs) -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor],
                                              torch.Tensor] | None:
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    except ImportError:
        return None
    keep = x.coil_args[1] if x.coil_args[1] is not None else x.sdpa_mask
    lengths = None
    if case.padding is not None:
        assert keep is not None
        lengths = keep[:, 0, 0, :].sum(-1)

    def mask_mod(b: Any, h: Any, qi: Any, kj: Any) -> Any:
        ok = kj >= 0
        if case.causal:
            ok = ok & (kj <= qi)
        if case.window:
            ok = ok & (kj > qi - case.window)
        if lengths is not None:
            ok = ok & (kj < lengths[b])
        return ok

    alibi = x.coil_args[2]

    def score_mod(score: Any, b: Any, h: Any, qi: Any, kj: Any) -> Any:
        return score + alibi[h] * (kj - qi)

    masked = case.causal or case.window or lengths is not None
    block_mask = create_block_mask(mask_mod, case.batch if lengths is not None else None, None,
                                   case.seq, case.seq, device=x.q.device) if masked else None
    compiled = torch.compile(flex_attention, dynamic=False)
    gqa = case.heads != case.kv_heads

    def run(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return compiled(q, k, v, score_mod=score_mod if alibi is not None else None,
                        block_mask=block_mask, scale=case.d ** -0.5, enable_gqa=gqa)

    return run


def _time(fn: Callable[[], Any]) -> float | None:
    try:
        fn()
        torch.cuda.synchronize()
        return float(triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median"))
    except Exception as exc:  # a candidate out of shared memory, Flex unavailable: a failed row
        print(f"    failed: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}")
        return None


def _autograd_pass(fn: Callable[..., torch.Tensor], x: Inputs) -> Callable[[], Any]:
    q, k, v = (t.detach().requires_grad_() for t in (x.q, x.k, x.v))

    def run() -> Any:
        out = fn(q, k, v)
        return torch.autograd.grad(out, (q, k, v), x.grad)

    return run


def _coil_op(x: Inputs) -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]:
    def run(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        out, _ = OPS[0](q, k, v, *x.coil_args)
        return out  # type: ignore[no-any-return]

    return run


def bench_case(case: Case, passes: list[str], quick: bool, flex: bool) -> list[dict[str, Any]]:
    """Rows {case, pass, impl, config, ms, tflops} of one case, printed as they come."""
    dev = torch.device("cuda")
    x = make_inputs(case, dev)
    fwd_flops = 4.0 * case.d * x.visible
    variant = AttentionVariant(x.coil_args[0] is not None, x.coil_args[1] is not None, False,
                               case.causal, case.window > 0)
    rule_fwd = forward_config(case.d, case.seq, case.seq, DTYPE, variant)
    rule_bwd = backward_config(case.d, case.seq, case.seq, DTYPE, variant)
    masked = case.padding is not None
    rows: list[dict[str, Any]] = []

    def record(pass_: str, impl: str, config: str, fn: Callable[[], Any]) -> None:
        ms = _time(fn)
        flops = fwd_flops * (1.0 if pass_ == "fwd" else 3.5)
        tflops = flops / (ms * 1e-3) / 1e12 if ms else None
        rows.append({"case": case.name, "pass": pass_, "impl": impl, "config": config,
                     "ms": ms, "tflops": tflops})
        shown = f"{ms:8.4f} ms {tflops:7.1f} TFLOP/s" if ms and tflops else "  failed"
        print(f"  {case.name:13s} {pass_:6s} {impl:10s} {config:34s} {shown}", flush=True)

    args = (x.q, x.k, x.v, *x.coil_args)
    sdpa, flex_fn = _sdpa(case, x), _flex(case, x) if flex else None
    if "fwd" in passes:
        configs: list[tuple[str, TileConfig]] = [("rule", rule_fwd)]
        if not quick:
            configs += [("cand", c) for c in FORWARD_CANDIDATES if c != rule_fwd]
        for impl, cfg in configs:
            record("fwd", impl, _name(cfg),
                   lambda cfg=cfg: attention_launch.forward(*args, config=cfg))
        if masked:
            record("fwd", "rule+skip", _name(rule_fwd),
                   lambda: attention_launch.forward(*args, skip_tiles=True))
        record("fwd", "op", "", lambda: OPS[0](*args))
        record("fwd", "sdpa", "", lambda: sdpa(x.q, x.k, x.v))
        if flex_fn is not None:
            record("fwd", "flex", "", lambda: flex_fn(x.q, x.k, x.v))
    if "fwdbwd" in passes:
        bwd_configs = [("rule", rule_bwd)]
        if not quick:
            bwd_configs += [("cand", c) for c in BACKWARD_CANDIDATES if c != rule_bwd]
        for impl, cfg in bwd_configs:
            def fwd_bwd(cfg: Any = cfg, skip: bool = False) -> Any:
                out, lse = attention_launch.forward(*args, skip_tiles=skip)
                return attention_launch.backward(x.grad, None, x.q, x.k, x.v, out, lse,
                                                 *x.coil_args, bias_grad=False, config=cfg,
                                                 skip_tiles=skip)

            record("fwdbwd", impl, _name(cfg.dkdv) + " / " + _name(cfg.dq), fwd_bwd)
            if masked and impl == "rule":
                record("fwdbwd", "rule+skip", "", lambda: fwd_bwd(rule_bwd, True))
        record("fwdbwd", "op", "", _autograd_pass(_coil_op(x), x))
        record("fwdbwd", "sdpa", "", _autograd_pass(sdpa, x))
        if flex_fn is not None:
            record("fwdbwd", "flex", "", _autograd_pass(flex_fn, x))
    rows.extend(_errors(case, x, sdpa, "fwdbwd" in passes))
    return rows


def _name(cfg: TileConfig) -> str:
    return f"{cfg.block_m}x{cfg.block_n} w{cfg.num_warps} s{cfg.num_stages}"


def _errors(case: Case, x: Inputs, sdpa: Callable[..., torch.Tensor],
            grads: bool) -> list[dict[str, Any]]:
    """Max |coil - SDPA| of the output (and dq, dk, dv), one row."""
    got = _autograd_pass(_coil_op(x), x)
    want = _autograd_pass(sdpa, x)
    out = _coil_op(x)(x.q, x.k, x.v)
    ref = sdpa(x.q, x.k, x.v)
    errors = {"out": float((out.float() - ref.float()).abs().max())}
    if grads:
        for name, g, w in zip(("dq", "dk", "dv"), got(), want(), strict=True):
            errors[name] = float((g.float() - w.float()).abs().max())
    print(f"  {case.name:13s} max |coil - sdpa|: "
          + ", ".join(f"{k} {v:.3g}" for k, v in errors.items()), flush=True)
    return [{"case": case.name, "pass": "check", "impl": "coil-vs-sdpa", "errors": errors}]


def summary(rows: list[dict[str, Any]]) -> None:
    """The fastest coil configuration and the peers per (case, pass)."""
    print("\n== fastest per case (coil's kernels launched directly; op includes autograd)")
    keys = sorted({(r["case"], r["pass"]) for r in rows if r["pass"] != "check"},
                  key=lambda key: ([c.name for c in CASES].index(key[0]), key[1]))
    for case, pass_ in keys:
        mine = [r for r in rows if (r["case"], r["pass"]) == (case, pass_) and r["ms"]]
        coil = [r for r in mine if r["impl"] in ("rule", "cand", "rule+skip")]
        if not coil:
            continue
        best = min(coil, key=lambda r: r["ms"])
        rule = next((r for r in coil if r["impl"] == "rule"), None)
        peers = {r["impl"]: r["ms"] for r in mine if r["impl"] in ("sdpa", "flex", "op")}
        line = (f"  {case:13s} {pass_:6s} best {best['impl']} {best['config']:34s} "
                f"{best['ms']:.4f} ms {best['tflops']:.1f} TFLOP/s")
        if rule is not None:
            line += f" | rule {rule['ms']:.4f}"
        line += "".join(f" | {k} {v:.4f}" for k, v in peers.items())
        print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default=",".join(c.name for c in CASES))
    parser.add_argument("--passes", default="fwd,fwdbwd")
    parser.add_argument("--quick", action="store_true", help="rule, op, SDPA, Flex only")
    parser.add_argument("--no-flex", action="store_true")
    parser.add_argument("--json", default=None, help="write every row to this file")
    ns = parser.parse_args()
    names = ns.cases.split(",")
    unknown = set(names) - {c.name for c in CASES}
    if unknown:
        parser.error(f"unknown cases {sorted(unknown)}; known: {[c.name for c in CASES]}")
    import triton

    print(f"torch {torch.__version__}, triton {triton.__version__}, "
          f"{torch.cuda.get_device_name()}", flush=True)
    rows: list[dict[str, Any]] = []
    for case in CASES:
        if case.name in names:
            rows += bench_case(case, ns.passes.split(","), ns.quick, not ns.no_flex)
    summary(rows)
    if ns.json:
        with open(ns.json, "w") as f:
            json.dump(rows, f, indent=1, default=str)


if __name__ == "__main__":
    main()
