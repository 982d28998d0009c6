#!/usr/bin/env bash
# session 33: where an inference warm start goes beyond Dynamo's tracing and coil's load.
# 1. `coil bench CASE --modes eager,coil --warm-runs 5` per CASES entry (no Inductor in the
#    parent process); prints the row and coil's warm runs with Dynamo's split.
# 2. bench/compile_profile.py --case CASE: cold into fresh folders, then warm runs: two under
#    cProfile (pstats in $OUT/warmN-CASE.pstats), two plain, one with COIL_PREHASH=0.
set -u
source bench/device_env.sh
for case in ${CASES:-resnet50_infer_bf16}; do
  timeout 240 python3 -m coil.backend.cli bench $case --modes eager,coil --warm-runs 5 --out /tmp/b33-$case --budget-s 2000 2>&1 | grep "done in" | cut -c1-100
  grep "^| [a-z]" /tmp/b33-$case/bench.md | grep -v "^| case" | cut -c1-330
  python3 - /tmp/b33-$case/bench.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for name, r in d["cases"].items():
    x = r["coil"]
    print(f"  {name} coil: cold {x.get('first_call_s')} warm runs {x.get('warm_first_call_runs_s')} dynamo cold {x.get('dynamo_cold')} warm {x.get('dynamo_warm')}")
PY
  d=/tmp/w33-$case; rm -rf $d
  for run in cold warm1 prof1 warm2 prof2 noprehash; do
    extra=""; case $run in prof*) extra="--cprofile-dump $OUT/$run-$case.pstats";; esac
    env=""; [ $run = noprehash ] && env="COIL_PREHASH=0"
    echo "== $case $run"
    env $env COIL_CACHE_DIR=$d/coil TRITON_CACHE_DIR=$d/triton TORCHINDUCTOR_CACHE_DIR=$d/inductor \
      timeout 150 python3 bench/compile_profile.py --case $case $extra 2>/dev/null \
      | grep "first call\|Dynamo\|coil stages" | cut -c1-110
  done
done
