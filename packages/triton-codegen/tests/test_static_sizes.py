"""Static sizes in the kernel's body and masks chosen when Triton compiles it (`KernelWriter.index_mask`)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from coil.knobs import knobs
from coil.triton_codegen import KernelConfig, generate
from coil.triton_codegen.variants import with_config


def _layer_norm(x, w):
    return (F.layer_norm(x, (x.shape[-1],), w),)


def test_static_sizes_are_assigned_and_masks_follow_the_block(tk):
    s = tk.schedule(_layer_norm, torch.randn(6, 40), torch.randn(40))
    (k,) = s.kernels()
    for strategy in ("persistent", "looped"):
        src = generate(k, s.graph.buffers(), "cuda", strategy).source
        assert "    xnumel = 6\n    rnumel = 40\n" in src, src
        assert "if xnumel % XBLOCK == 0:\n        xmask = tl.full([XBLOCK, 1], 1, tl.int1)\n" in src, src
        assert "if rnumel % RBLOCK == 0:" in src and "rmask = tl.full([1, RBLOCK], 1, tl.int1)" in src, src
    pw = tk.schedule(lambda x: (x.sin() * 2,), torch.randn(6, 40))
    (k,) = pw.kernels()
    src = generate(k, pw.graph.buffers(), "cuda").source
    assert "    xnumel = 240\n" in src and "xmask = tl.full([XBLOCK], 1, tl.int1)" in src and "rnumel" not in src, src


# loops over 8 and 16 (several iterations, the last one partial or not); persistent blocks of 64
# over the row of 40; XBLOCK dividing the 6 rows or not
_NORM_BLOCKS = ([("looped", x, r) for x in (1, 2, 4) for r in (8, 16)]
                + [(s, x, 64) for s in ("persistent", "reread") for x in (1, 2, 4, 8)])


@pytest.mark.parametrize("strategy, xblock, rblock", _NORM_BLOCKS)
def test_layer_norm_is_right_whether_or_not_the_blocks_divide_the_sizes(tk, strategy, xblock, rblock):
    """6 x 40 under the interpreter, equal to eager with every block."""
    x, w = torch.randn(6, 40), torch.randn(40)
    kind = "persistent" if strategy == "reread" else strategy
    cfg = KernelConfig(kind, xblock, rblock, 4)
    (got,) = tk.run(_layer_norm, x, w, strategy=kind, reread=strategy == "reread",
                    pick=lambda ks: with_config(ks, cfg))
    torch.testing.assert_close(got, _layer_norm(x, w)[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n", [64, 100])
def test_pointwise_scan_and_outer_kernels_are_right_with_static_masks(tk, n):
    """Blocks that divide the sizes (n = 64) and blocks that do not (n = 100): a pointwise kernel,
    a cumsum (a scan) and a sum over dim 0 of a row-major matrix (an "outer" reduction)."""
    x = torch.randn(n, 48)
    tk.check(lambda a: (a.sin() * 2 + 1,), x)
    tk.check(lambda a: (torch.cumsum(a, 1),), x)
    tk.check(lambda a: (a.sum(0),), x, strategy="outer", rtol=1e-4, atol=1e-4)
    tk.check(lambda a: (torch.cumsum(a, 1),), x, strategy="looped")


_COMPILE = """
import importlib.util, json, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
path, name, sig, consts = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4])
spec = importlib.util.spec_from_file_location(name, path)
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
src = ASTSource(fn=getattr(mod, name), signature={**sig, **dict.fromkeys(consts, "constexpr")}, constexprs=consts)
print(triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4}).asm["ttgir"])
"""


def _ttgir(source: str, name: str, signature: dict[str, str], constexprs: dict[str, int], tmp_path) -> str:
    """The TTGIR of `source`'s kernel, compiled by Triton for sm_90 (no GPU needed) in a process
    without the interpreter this package's tests run under."""
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    env = knobs.environ(triton_interpret=None)
    env["TRITON_CACHE_DIR"] = str(tmp_path / "triton-cache")
    p = subprocess.run([sys.executable, "-c", _COMPILE, str(path), name, json.dumps(signature), json.dumps(constexprs)],
                       capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout


@pytest.mark.parametrize("cols, masked", [(64, False), (40, True)])
def test_a_divisible_static_norm_compiles_without_predicates(tk, tmp_path, cols, masked):
    """Compiled by Triton for sm_90: a persistent layer norm over 8 x 64 (RBLOCK 64, XBLOCK 1)
    loads and stores with no mask operand; over 8 x 40 (RBLOCK 64) every access keeps its mask."""
    s = tk.schedule(_layer_norm, torch.randn(8, cols), torch.randn(cols))
    (k,) = s.kernels()
    ks = generate(k, s.graph.buffers(), "cuda", "persistent")
    params = ks.source.split(f"def {ks.name}(", 1)[1].split(")", 1)[0].split(", ")
    sig = {p: "*fp32" for p in params if p.startswith("ptr")}
    ir = _ttgir(ks.source, ks.name, {**sig, "xnumel": "i32", "rnumel": "i32"}, {"XBLOCK": 1, "RBLOCK": 64}, tmp_path)
    accesses = [ln.split(":")[0] for ln in ir.splitlines() if "tt.load %" in ln or "tt.store %" in ln]
    assert len(accesses) == 3, ir  # the row, the weight, the output
    # operands come before the type: `%r = tt.load %ptr[, %mask[, %other]]`, `tt.store %ptr, %v[, %mask]`
    with_mask = [a for a in accesses if a.count("%") > 2]
    assert len(with_mask) == (3 if masked else 0), accesses
