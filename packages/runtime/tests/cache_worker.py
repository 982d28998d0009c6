"""Subprocess body for test_subprocess.py (not a test module).

Usage: python cache_worker.py CONFIG.json RANK   (two ranks run at once, TRITON_INTERPRET unset)

Rank 0 imports triton.language (compiled mode) before coil, as Dynamo does; rank 1 checks that
importing coil.runtime imports neither torch nor triton. Then:
  phase 1: both ranks compile the add and row-sum kernels for the CPU at the same moment (a file
           barrier lines them up) into one empty cache, and check them against torch;
  phase 2: rank 0 compiles a third kernel and signals; rank 1, which has never loaded it, then
           compiles it: it must come from the disk cache, untouched.
Prints one JSON line of results.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from coil.knobs import knobs

config = json.loads(Path(sys.argv[1]).read_text())
rank = int(sys.argv[2])
assert "TRITON_INTERPRET" not in knobs.environ(), "the test must run without TRITON_INTERPRET"

if rank == 0:
    import triton.language
else:
    import coil.runtime  # noqa: F401

    assert "triton" not in sys.modules and "torch" not in sys.modules

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from coil.runtime import KernelSpec, TensorArg, compile_kernels  # noqa: E402
from coil.runtime.disk_cache import cache_stats  # noqa: E402

sync = Path(config["sync"])
CPU = torch.device("cpu")
f32 = TensorArg(torch.float32)


def wait_for(pattern: str, count: int) -> None:
    deadline = time.monotonic() + 150
    while len(list(sync.glob(pattern))) < count:
        assert time.monotonic() < deadline, f"timed out waiting for {pattern}"
        time.sleep(0.01)


# phase 1: concurrent compiles of the same specs
(sync / f"ready-{rank}").touch()
wait_for("ready-*", 2)
specs = [
    KernelSpec("add_kernel", config["add_source"], (f32, f32, f32, 1024), {"BLOCK": 64}),
    KernelSpec("rowsum_kernel", config["rowsum_source"], (f32, f32), {"N_COLS": 33, "RBLOCK": 16}),
]
kernels = compile_kernels(specs, CPU)
x, y, out = torch.randn(1000), torch.randn(1000), torch.empty(1000)
kernels["add_kernel"]((16,), x, y, out, 1000)
assert torch.allclose(out, x + y)
m, sums = torch.randn(17, 33), torch.empty(17)
kernels["rowsum_kernel"]((17,), m, sums)
assert torch.allclose(sums, (m * m).sum(1), rtol=1e-5, atol=1e-5)
phase1 = cache_stats()

# phase 2: rank 1 reuses what rank 0 wrote
reuse_source = config["add_source"].replace("add_kernel", "add_kernel_reused")
reuse = KernelSpec("add_kernel_reused", reuse_source, (f32, f32, f32, 1024), {"BLOCK": 32})
if rank == 1:
    wait_for("written-0", 1)
reused = compile_kernels([reuse], CPU)["add_kernel_reused"]
stat = reused.path.stat()
if rank == 0:
    (sync / "written-0").touch()
reused((1,), x[:20], y[:20], out[:20], 20)
assert torch.allclose(out[:20], x[:20] + y[:20])
phase2 = cache_stats()

print(
    json.dumps(
        {
            "phase1": [phase1.hits, phase1.writes, phase1.rebuilds],
            "phase2": [
                phase2.hits - phase1.hits,
                phase2.writes - phase1.writes,
                phase2.rebuilds - phase1.rebuilds,
            ],
            "paths": sorted(str(k.path) for k in kernels.values()),
            "reused_path": str(reused.path),
            "reused_stat": [stat.st_mtime_ns, stat.st_ino],
            "library_compiled_mode": isinstance(tl.zeros, triton.JITFunction),
            "jit_call_restored": triton.JITFunction.__call__.__module__ == "triton.runtime.jit",
        }
    )
)
