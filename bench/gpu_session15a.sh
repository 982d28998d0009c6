#!/usr/bin/env bash
# session 15: the scatter-in-place change on the GPU (wheels of the working tree). End-to-end tests
# that touch it (and test_channels_last.py, session 13's open question), the runtime's GPU tests,
# then each training case's own-process warm peak (`python -m coil.backend.bench_models CASE MODE`)
# for coil and Inductor, then GPT-2's graph pool (bench/graph_pool_probe.py). CASES, RUNS override.
set -u
source bench/device_env.sh
timeout ${TESTS_S:-240} python3 -m pytest -q -p no:cacheprovider tests-integration/test_inplace_scatter.py \
  tests-integration/test_models.py tests-integration/test_native_put.py tests-integration/test_channels_last.py \
  > $OUT/tests.log 2>&1
grep -E "passed|failed|FAILED|^E " $OUT/tests.log | tail -12
timeout ${TESTS_S:-240} python3 -m pytest -q -p no:cacheprovider packages/runtime/tests -m gpu > $OUT/runtime_gpu.log 2>&1
tail -2 $OUT/runtime_gpu.log
for c in ${CASES:-gpt2_train_amp bert_base_train_amp}; do
  for mode in ${RUNS:-coil inductor}; do
    rm -rf /tmp/coil-cache /tmp/inductor-cache
    TORCHINDUCTOR_CACHE_DIR=/tmp/inductor-cache timeout ${PER_RUN_S:-150} \
      python3 -m coil.backend.bench_models $c $mode > $OUT/peak_${c}_${mode}.log 2>&1
    echo "$c $mode: $(grep -E '^(first_call_s|warm_peak)=' $OUT/peak_${c}_${mode}.log | tr '\n' ' ' | cut -c1-400)"
  done
done
rm -rf /tmp/coil-cache
timeout ${PROBE_S:-150} python3 bench/graph_pool_probe.py gpt2_train_amp coil > $OUT/pool_gpt2.json 2> $OUT/pool_gpt2.err
python3 - $OUT/pool_gpt2.json <<'PY'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception as e:
    print("probe failed:", e); sys.exit(0)
print({k: d[k] for k in d if k in ("peak_mib", "peak_allocated_mib", "first_call_s")})
for p in d.get("pools", []):
    print({k: p[k] for k in p if k != "growth"})
    for g in p.get("growth", [])[-6:]:
        print("   ", g)
PY
