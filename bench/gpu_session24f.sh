#!/usr/bin/env bash
# session 24: the runtime's GPU tests (the lazy-clone resize guard among them) and the
# CUDA-graph integration tests, in one process
set -u
source bench/device_env.sh
timeout 200 python3 -m pytest -q -p no:cacheprovider packages/runtime/tests/test_gpu_fast.py \
  tests-integration/test_cuda_graph_segments.py > $OUT/tests.log 2>&1
grep -E "passed|failed|FAILED|^E  " $OUT/tests.log | tail -12
