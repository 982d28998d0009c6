#!/usr/bin/env bash
# session 8: the CUDA-graph GPU tests and test_autotune.py alone (each file in its own process),
# then bench/train_graph_memory.py (Inductor and coil with training graphs) on the AMP steps
set -u
source bench/device_env.sh
export COIL_AUTOTUNE=0
for t in ${TESTS:-packages/runtime/tests/test_gpu_fast.py tests-integration/test_cuda_graph_segments.py tests-integration/test_autotune.py}; do
  echo "== $t"
  timeout ${TEST_S:-150} python3 -m pytest -q -p no:cacheprovider --show-capture=no --tb=short $t > $OUT/t.log 2>&1
  grep -v "^DEBUG" $OUT/t.log | grep -E "passed|failed|Error|error|FAIL" | tail -8 | cut -c1-300
done
for case in ${CASES:-resnet50_train_amp gpt2_train_amp}; do
  timeout ${PER_CASE_S:-150} python3 bench/train_graph_memory.py $case ${CONFIGS:-inductor coil_on} | tee -a $OUT/train_graph_memory.jsonl | cut -c1-400
done
