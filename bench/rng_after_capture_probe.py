"""Which compiled op leaves the CUDA generator unusable ("Offset increment outside graph capture
encountered unexpectedly" from every later torch.randn): the GPU OpInfo sweep (session 18,
`bench/gpu_session18h.sh`) failed to build the sample inputs of 295 pairs after some earlier pair
in the same worker.

    COIL_OPINFO_DEVICE=cuda python bench/rng_after_capture_probe.py OP [OP ...] [--dtype float32]

Runs each op's OpInfo pair (tests-integration/opinfo/harness.run_pair, one sample) in this one
process, in order, and after each tries torch.randn on the GPU; prints each op's verdict, coil's
logged warnings, and stops at the first op after which the generator fails.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests-integration"))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("ops", nargs="+")
    ap.add_argument("--dtype", default="float32")
    args = ap.parse_args()
    import torch
    from opinfo.harness import load_op_db, op_key, run_pair

    logging.basicConfig(level=logging.WARNING, format="  log %(name)s %(levelname)s: %(message)s")
    ops = {op_key(op): op for op in load_op_db()}
    for name in args.ops:
        res = run_pair(ops[name], args.dtype, max_samples=1, timeout=90)
        bad = [c for c in res.cases if not c.passed]
        print(f"{name}: {'ok' if not bad else bad[0].reason[:200]}", flush=True)
        try:
            torch.randn(1, device="cuda")
        except RuntimeError as exc:
            print(f"== the generator fails after {name}: {str(exc)[:200]}", flush=True)
            return 1
    print("== the generator works after every op", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
