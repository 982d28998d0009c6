"""An LM head's product onto an unaligned vocabulary: time and peak memory of ways to compute it.

    python bench/lm_head_probe.py [--rows 2048] [--hidden 768] [--vocab 50257 30522] [--bias]

For each vocabulary V (rows of V bf16 elements are not 16-byte aligned when V is odd or not a
multiple of 8), the contiguous logits `x @ W.t()` ([rows, V], W: [V, hidden], bf16) computed as:

- `plain`: `torch.mm(x, W.t())` (cuBLAS on the unaligned output rows);
- `pad_w`: what coil's `pad_matmul_strides` emits for an LM head whose weight is a graph input:
  W padded with zero rows to V_pad (a multiple of 8), the product into [rows, V_pad], then the
  slice `[:, :V]` copied contiguous;
- `out_view`: the product of the unpadded W written with `out=` into the `[:, :V]` view of a
  [rows, V_pad] buffer (aligned leading dimension), then copied contiguous;
- `chunks_K`: `out_view` in K row chunks through one [rows / K, V_pad] scratch, each chunk copied
  into its rows of the contiguous result (scratch K times smaller);
- `split`: the product onto W's first V8 rows (V8 = V rounded down to a multiple of 8: a
  contiguous [rows, V8] result, aligned rows) and onto its last V - V8 rows, joined by `cat`
  (no padded copy of W).

Each is checked against `plain` (bitwise: the same GEMM on the same operands can differ only
by cuBLAS's kernel choice, so the check is `allclose` at bf16 tolerance). Printed per variant:
median ms (`triton.testing.do_bench`) and the peak memory above the operands and the result
(`max_memory_allocated`, MiB). CUDA only.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch


def _variants(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None,
              chunks: list[int]) -> dict[str, Callable[[], torch.Tensor]]:
    rows, vocab = x.shape[0], w.shape[0]
    vpad = -(-vocab // 8) * 8

    def mm(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        if bias is None:
            return torch.mm(a, b, out=out) if out is not None else torch.mm(a, b)
        bb = bias if b.shape[1] == vocab else torch.nn.functional.pad(bias, (0, b.shape[1] - vocab))
        return torch.addmm(bb, a, b, out=out) if out is not None else torch.addmm(bb, a, b)

    def plain() -> torch.Tensor:
        return mm(x, w.t())

    def pad_w() -> torch.Tensor:
        wp = torch.nn.functional.pad(w, (0, 0, 0, vpad - vocab))
        return mm(x, wp.t())[:, :vocab].contiguous()

    def out_view() -> torch.Tensor:
        buf = torch.empty(rows, vpad, dtype=x.dtype, device=x.device)
        mm(x, w.t(), out=buf[:, :vocab])
        return buf[:, :vocab].contiguous()

    def chunked(k: int) -> Callable[[], torch.Tensor]:
        step = -(-rows // k)

        def run() -> torch.Tensor:
            res = torch.empty(rows, vocab, dtype=x.dtype, device=x.device)
            scratch = torch.empty(step, vpad, dtype=x.dtype, device=x.device)
            for r0 in range(0, rows, step):
                n = min(step, rows - r0)
                view = scratch[:n, :vocab]
                mm(x[r0:r0 + n], w.t(), out=view)
                res[r0:r0 + n].copy_(view)
            return res
        return run

    def split() -> torch.Tensor:
        v8 = vocab // 8 * 8
        if bias is None:
            return torch.cat([torch.mm(x, w[:v8].t()), torch.mm(x, w[v8:].t())], dim=1)
        return torch.cat([torch.addmm(bias[:v8], x, w[:v8].t()), torch.addmm(bias[v8:], x, w[v8:].t())], dim=1)

    def split_parts() -> torch.Tensor:  # the two products alone (what `split` adds to the cat)
        v8 = vocab // 8 * 8
        torch.mm(x, w[:v8].t())
        return torch.mm(x, w[v8:].t())

    out = {"plain": plain, "pad_w": pad_w, "out_view": out_view, "split": split, "split_mm_only": split_parts}
    out.update({f"chunks_{k}": chunked(k) for k in chunks})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=2048)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--vocab", type=int, nargs="+", default=[50257, 30522])
    ap.add_argument("--bias", action="store_true")
    ap.add_argument("--chunks", type=int, nargs="*", default=[8])
    a = ap.parse_args()
    from triton.testing import do_bench

    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    g = torch.Generator(device="cuda").manual_seed(0)
    for vocab in a.vocab:
        x = torch.randn(a.rows, a.hidden, device="cuda", dtype=torch.bfloat16, generator=g)
        w = torch.randn(vocab, a.hidden, device="cuda", dtype=torch.bfloat16, generator=g) * 0.05
        bias = torch.randn(vocab, device="cuda", dtype=torch.bfloat16, generator=g) if a.bias else None
        ref = torch.mm(x, w.t()) if bias is None else torch.addmm(bias, x, w.t())
        result_mib = ref.numel() * ref.element_size() / 2**20
        print(f"== rows {a.rows}, hidden {a.hidden}, vocab {vocab}{' + bias' if a.bias else ''}: "
              f"result {result_mib:.1f} MiB")
        for name, fn in _variants(x, w, bias, a.chunks).items():
            got = fn()
            ok = name.endswith("_only") or (got.is_contiguous()
                                             and torch.allclose(got.float(), ref.float(), rtol=1e-2, atol=1e-2))
            del got
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            kept = fn()
            torch.cuda.synchronize()
            extra = (torch.cuda.max_memory_allocated() - base) / 2**20 - (0 if name.endswith("_only") else result_mib)
            del kept
            ms = do_bench(fn, warmup=50, rep=300)
            print(f"  {name:<10} {ms:8.4f} ms  scratch {extra:7.1f} MiB  {'ok' if ok else 'MISMATCH'}")


if __name__ == "__main__":
    main()
