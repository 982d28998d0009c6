#!/usr/bin/env bash
# session 15: after the interpreter fix (triton.language put back after each interpreted launch):
# the runtime's GPU tests, then the whole end-to-end suite on the GPU in one process
set -u
source bench/device_env.sh
timeout ${TESTS_S:-200} python3 -m pytest -q -p no:cacheprovider packages/runtime/tests -m gpu > $OUT/runtime_gpu.log 2>&1
tail -2 $OUT/runtime_gpu.log
timeout ${INTEGRATION_S:-480} python3 -m pytest -q -p no:cacheprovider tests-integration > $OUT/integration.log 2>&1
grep -E "passed|failed|FAILED|^E " $OUT/integration.log | tail -15
