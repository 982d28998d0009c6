#!/usr/bin/env bash
# session 18: (1) the end-to-end tests known to fail on CUDA (tests-integration/gpu_known_failures.py
# ON_CUDA), run with their xfail marks ignored (--runxfail) and long tracebacks, log in
# $OUT/known.log; (2) where coil's warm start of CASES goes (bench/gpu_session11a.sh: coil cold,
# warm, warm under cProfile, profiles in $OUT)
set -u
source bench/device_env.sh
IDS=$(python3 - <<'PY'
import sys
sys.path.insert(0, "tests-integration")
from gpu_known_failures import ON_CUDA
print(" ".join(sorted({"tests-integration/" + k.rstrip("[").split("[")[0] if k.endswith("[") else "tests-integration/" + k for k in ON_CUDA})))
PY
)
timeout ${TESTS_S:-240} python3 -m pytest -p no:cacheprovider --runxfail -rA --tb=long $IDS > $OUT/known.log 2>&1
grep -E "^(PASSED|FAILED|ERROR)|passed|failed" $OUT/known.log | tail -30
MICRO= CASES=${CASES:-gpt2_train_amp} RUNS=${RUNS:-coil:cold coil:warm coil:warmprof} PER_RUN_S=${PER_RUN_S:-150} bash bench/gpu_session11a.sh
