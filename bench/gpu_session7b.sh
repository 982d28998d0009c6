#!/usr/bin/env bash
# session 7: training graphs that hand their outputs out (hold_outputs=False): the runtime's and
# the backend's CUDA-graph GPU tests, then bench/train_graph_memory.py with training graphs on
set -u
OUT=${OUT:-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 COIL_CACHE_DIR=/tmp/coil-cache COIL_AUTOTUNE=0
timeout 200 python3 -m pytest -q -p no:cacheprovider --show-capture=no --tb=short \
  packages/runtime/tests/test_gpu_fast.py tests-integration/test_cuda_graph_segments.py > $OUT/gpu_tests.log 2>&1; grep -v "^DEBUG" $OUT/gpu_tests.log | tail -30 | cut -c1-400
for case in ${CASES:-resnet50_train_amp gpt2_train_amp}; do
  timeout ${PER_CASE_S:-150} python3 bench/train_graph_memory.py $case ${CONFIGS:-coil_on} | tee -a $OUT/train_graph_memory.jsonl
done
