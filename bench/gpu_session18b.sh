#!/usr/bin/env bash
# session 18: after the fixes of the end-to-end tests that failed on CUDA (session 15's list in
# tests-integration/gpu_known_failures.py, emptied): those files and the runtime's GPU tests,
# then the whole end-to-end suite on the GPU (bench/gpu_session15g.sh); logs in $OUT
set -u
source bench/device_env.sh
timeout ${FOCUS_S:-200} python3 -m pytest -q -p no:cacheprovider -rfEX --tb=short \
  tests-integration/test_native_coverage_ieee.py tests-integration/test_opinfo_regressions.py > $OUT/focus.log 2>&1
grep -E "^(FAILED|ERROR|XPASS)|passed|failed" $OUT/focus.log | tail -20
bash bench/gpu_session15g.sh
