#!/usr/bin/env bash
# session 33: two wheel sets' warm starts (.whl_old against .whl). First, per wheel set, which of
# torch's modules (its built-in backends, AOTAutograd, networkx) a bare process has imported after
# importing coil.backend and after one torch.compile(backend="coil") call, and that call's
# seconds; then warm_ab (bench/device_env.sh) over CASES, ROUNDS alternating warm runs. Session 33
# ran it with .whl_old from 8cd01b4 and .whl from a change that registered "coil" with Dynamo at
# import (dropped: docs/perf.md, session 33).
set -u
source bench/device_env.sh
old_wheels || echo "no .whl_old"
for site in /tmp/site_old /tmp/site; do
  echo "== $(basename $site): modules"
  PYTHONPATH=$site COIL_CACHE_DIR=/tmp/mods-$(basename $site) python3 - <<'PY'
import sys, time
import torch
import coil.backend  # noqa: F401
watch = ["torch._dynamo.backends.common", "torch._functorch.aot_autograd", "networkx"]
print("  after import:", {m: m in sys.modules for m in watch})
t0 = time.perf_counter()
f = torch.compile(lambda x: x * 2 + 1, backend="coil")
print("  torch.compile call", round(time.perf_counter() - t0, 3), "s; after it:", {m: m in sys.modules for m in watch})
PY
done
for case in ${CASES:-resnet50_infer_bf16}; do
  warm_ab $case
done
