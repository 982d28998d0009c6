#!/usr/bin/env bash
# session 23: the GPU integration tests the session's changes touch (inlining, reductions, CUDA
# graphs with module buffers, models), on this tree's wheels
set -u
source bench/device_env.sh
timeout ${TEST_S:-400} python3 -m pytest -q -p no:cacheprovider tests-integration/test_inline.py \
  tests-integration/test_reductions.py tests-integration/test_cuda_graph_segments.py tests-integration/test_models.py \
  > $OUT/tests.log 2>&1
grep -E "passed|failed|FAILED|^E " $OUT/tests.log | tail -12
