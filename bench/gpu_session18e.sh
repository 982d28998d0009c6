#!/usr/bin/env bash
# session 18: `coil bench micro` (all 16, as 18c) with COIL_LOGS=autotune, its log in $OUT: which
# launch configuration coil's tuner kept for cross_entropy_bf16 inside the suite's process, where
# 18c timed 0.155 ms and micro_probe (18d) 0.126 with the same wheels
set -u
source bench/device_env.sh
mkdir -p /tmp/b18e
COIL_LOGS=autotune timeout ${MICRO_BENCH_S:-200} python3 -m coil.backend.cli bench micro --out /tmp/b18e/micro \
  --budget-s 2000 > $OUT/micro_autotune.log 2>&1
python3 - /tmp/b18e/micro/bench.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for name, r in d["cases"].items():
    i, c = r["inductor"]["ms"], r["coil"]["ms"]
    print(f"  {name:22s} ind {i:.4f} coil {c:.4f} ratio {c / i:.3f} copy% {r['coil']['pct_copy']:.0f}")
PY
grep -n "autotuning\|chosen\|discard\|WARNING\|memo" $OUT/micro_autotune.log | cut -c1-200 | tail -60
