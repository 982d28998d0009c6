#!/usr/bin/env bash
# session 18: after the generator reset on a failed capture and the device of input-less graphs:
# the runtime's GPU tests (test_gpu_fast.py has both), then the GPU OpInfo sweep again
# (bench/gpu_session18h.sh: float32 and bfloat16, one sample per pair)
set -u
source bench/device_env.sh
timeout ${TESTS_S:-200} python3 -m pytest -q -p no:cacheprovider -rfE packages/runtime/tests -m gpu > $OUT/runtime_gpu.log 2>&1
grep -E "^(FAILED|ERROR)|passed|failed" $OUT/runtime_gpu.log | tail -8
bash bench/gpu_session18h.sh
