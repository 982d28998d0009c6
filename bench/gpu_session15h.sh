#!/usr/bin/env bash
# session 15 (ran with wheels of c78980b plus half-precision stores through float32 on CUDA, a
# change reverted after this run: test_int_to_bfloat16_matches_eager still failed on the H100):
# the end-to-end files with the cast cases, on the GPU (marks from gpu_known_failures.py)
set -u
source bench/device_env.sh
timeout ${TESTS_S:-300} python3 -m pytest -q -p no:cacheprovider -rxX tests-integration/test_opinfo_regressions.py \
  tests-integration/test_native_coverage_ieee.py tests-integration/test_models.py > $OUT/tests.log 2>&1
grep -E "passed|failed|FAILED|^E |XPASS|XFAIL" $OUT/tests.log | cut -c1-160 | tail -25
