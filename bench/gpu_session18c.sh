#!/usr/bin/env bash
# session 18: round(decimals) of half types on CUDA after following eager's CUDA kernel (its first
# product rounded to the half type), the IEEE end-to-end file once more; then `coil bench micro`
# (all 16 cases beside Inductor: the float negation now written as x * -1.0), summary printed
set -u
source bench/device_env.sh
timeout ${FOCUS_S:-200} python3 -m pytest -q -p no:cacheprovider -rfEX --tb=short \
  tests-integration/test_native_coverage_ieee.py > $OUT/focus.log 2>&1
grep -E "^(FAILED|ERROR|XPASS|E  )|passed|failed" $OUT/focus.log | tail -20
mkdir -p /tmp/b18c
timeout ${MICRO_BENCH_S:-200} python3 -m coil.backend.cli bench micro --out /tmp/b18c/micro --budget-s 2000 2>&1 | grep -c "done in"
python3 - /tmp/b18c/micro/bench.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
n = 0
for name, r in d["cases"].items():
    i, c = r["inductor"]["ms"], r["coil"]["ms"]
    n += c <= i
    print(f"  {name:22s} ind {i:.4f} coil {c:.4f} ratio {c / i:.3f} copy% {r['coil']['pct_copy']:.0f} acc {r['coil']['accuracy_ok']}")
print(f"  coil <= inductor on {n} of {len(d['cases'])}; copy GB/s {d['copy_gbs']}")
PY
cp /tmp/b18c/micro/bench.json $OUT/micro_bench.json
