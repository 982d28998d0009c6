#!/usr/bin/env bash
# (ran with wheels built from ff6a96c + bench/experiments/session14_late_inputs.patch)
# session 14: late inputs on the GPU. The runtime's GPU tests (late inputs and the fast path /
# CUDA-graph runner), then each training case's own-process warm peak (`python -m
# coil.backend.bench_models CASE MODE`: cold first call and the peak `coil bench` reports) for
# coil with COIL_LATE_INPUTS=1 and =0 and for Inductor. CASES, MODES_EXTRA override.
set -u
source bench/device_env.sh
timeout ${TESTS_S:-180} python3 -m pytest -q -p no:cacheprovider packages/runtime/tests/test_gpu_late.py \
  packages/runtime/tests/test_gpu_fast.py -m gpu > $OUT/runtime_gpu.log 2>&1
tail -5 $OUT/runtime_gpu.log
for c in ${CASES:-gpt2_train_amp}; do
  for run in ${RUNS:-coil:1 coil:0 inductor:1}; do
    mode=${run%%:*}; late=${run##*:}
    rm -rf /tmp/coil-cache /tmp/inductor-cache
    COIL_LATE_INPUTS=$late TORCHINDUCTOR_CACHE_DIR=/tmp/inductor-cache timeout ${PER_RUN_S:-150} \
      python3 -m coil.backend.bench_models $c $mode > $OUT/peak_${c}_${mode}_$late.log 2>&1
    echo "$c $mode late=$late: $(grep -E '^(first_call_s|warm_peak)=' $OUT/peak_${c}_${mode}_$late.log | tr '\n' ' ' | cut -c1-400)"
  done
done
