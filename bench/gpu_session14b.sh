#!/usr/bin/env bash
# (ran with wheels built from ff6a96c + bench/experiments/session14_late_inputs.patch)
# session 14: late inputs, where the graph pool's memory goes. The runtime's late-input GPU tests,
# then the pool probe (bench/graph_pool_probe.py) of CASES' coil step with COIL_LATE_INPUTS=1 and
# =0 (RUNS: LATE:SCRATCH pairs, SCRATCH = COIL_LATE_SCRATCH): per pool the reserved size, the live
# peak and what is live at it; each runner's inputs.
set -u
source bench/device_env.sh
timeout 120 python3 -m pytest -q -p no:cacheprovider packages/runtime/tests/test_gpu_late.py -m gpu > $OUT/runtime_gpu.log 2>&1
tail -2 $OUT/runtime_gpu.log
for c in ${CASES:-gpt2_train_amp}; do
  for run in ${RUNS:-1:1 0:1}; do
    late=${run%%:*}; scratch=${run##*:}
    rm -rf /tmp/coil-cache
    COIL_LATE_INPUTS=$late COIL_LATE_SCRATCH=$scratch timeout ${PER_RUN_S:-200} python3 bench/graph_pool_probe.py $c coil > $OUT/pool_${c}_${run/:/_}.json 2> $OUT/pool_${c}_${run/:/_}.err
    python3 - $OUT/pool_${c}_${run/:/_}.json $c $run <<'PY' || tail -3 $OUT/pool_${c}_${run/:/_}.err
import json, sys
d = json.load(open(sys.argv[1]))
print(f"== {sys.argv[2]} late:scratch={sys.argv[3]}: peak {d['peak_mib']} MiB, allocated {d['peak_allocated_mib']}")
for p, v in d["pools"].items():
    print("  pool", p, json.dumps(v))
for p, sites in d["at_peak"].items():
    print("  at peak of", p, json.dumps(sites[:8]))
for r in d["runners"]:
    print("  runner", json.dumps(r))
PY
  done
done
