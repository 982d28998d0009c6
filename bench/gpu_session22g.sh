#!/usr/bin/env bash
# session 22: the end-to-end tests that touch reductions, autotuning and the models, on the GPU,
# with this tree's wheels (online softmax and the one-row loop candidates)
set -u
source bench/device_env.sh
timeout ${TESTS_S:-300} python3 -m pytest -q -p no:cacheprovider -x ${TESTS:-tests-integration/test_reductions.py \
  tests-integration/test_autotune.py tests-integration/test_models.py} > $OUT/tests.log 2>&1
grep -E "passed|failed|FAILED|^E " $OUT/tests.log | tail -12
