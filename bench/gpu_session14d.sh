#!/usr/bin/env bash
# (ran with wheels built from ff6a96c + bench/experiments/session14_late_inputs.patch)
# session 14: late inputs A/B. The runtime's late-input GPU tests; the end-to-end test of training
# graphs' memory (test_cuda_graph_segments.py, Deep: an output the loss does not use) with
# COIL_LATE_INPUTS=0 and =1; then CASES' coil own-process warm peak with both settings.
set -u
source bench/device_env.sh
timeout 100 python3 -m pytest -q -p no:cacheprovider packages/runtime/tests/test_gpu_late.py -m gpu > $OUT/runtime_gpu.log 2>&1
tail -2 $OUT/runtime_gpu.log
for late in 0 1; do
  COIL_LATE_INPUTS=$late timeout 100 python3 -m pytest -q -p no:cacheprovider tests-integration/test_cuda_graph_segments.py \
    -k "hold_no_more_memory" > $OUT/integration_late$late.log 2>&1
  echo "late=$late: $(tail -1 $OUT/integration_late$late.log)"
  grep "^E   *AssertionError" $OUT/integration_late$late.log | head -2 | cut -c1-300
done
for c in ${CASES:-llama_style_train_amp}; do
  for late in 1 0; do
    rm -rf /tmp/coil-cache
    COIL_LATE_INPUTS=$late timeout 150 python3 -m coil.backend.bench_models $c coil > $OUT/peak_${c}_$late.log 2>&1
    echo "$c coil late=$late: $(grep -E '^(first_call_s|warm_peak)=' $OUT/peak_${c}_$late.log | tr '\n' ' ' | cut -c1-300)"
  done
done
