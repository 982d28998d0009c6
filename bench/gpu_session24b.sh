#!/usr/bin/env bash
# session 24: is test_gpu_training_graphs_hold_no_more_memory_than_uncaptured_steps's failure in
# 24a (525 vs 359 MiB) the lazy clones' or the test order's? The CUDA-graph integration tests
# alone with this tree's wheels, then after the runtime's GPU tests in one process with the
# wheels of the commit before (.whl_old); then Inductor's step time and warm peak of the HF
# inference cases (train_step_time.py CASE inductor) for the perf table
set -u
source bench/device_env.sh
old_wheels || echo "no .whl_old"
t=tests-integration/test_cuda_graph_segments.py
timeout 100 python3 -m pytest -q -p no:cacheprovider $t > $OUT/alone.log 2>&1
echo "alone, new:"; grep -E "passed|failed|FAILED|^E  .*Assert" $OUT/alone.log | tail -4
PYTHONPATH=/tmp/site_old timeout 120 python3 -m pytest -q -p no:cacheprovider packages/runtime/tests/test_gpu_fast.py $t \
  -k "not lazy and not kept_across" > $OUT/order_old.log 2>&1
echo "after test_gpu_fast, old:"; grep -E "passed|failed|FAILED|^E  .*Assert" $OUT/order_old.log | tail -4
for case in ${CASES:-gpt2_infer_bf16 llama_style_infer_bf16 bert_base_infer_bf16}; do
  COIL_CACHE_DIR=/tmp/coil-cache-$case timeout 150 python3 bench/train_step_time.py $case inductor 2>&1 | tail -1
done
