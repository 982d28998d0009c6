#!/usr/bin/env bash
# session 22: softmax over an outer dim fused into one kernel (scheduler visit_order.py):
# bench/outer_softmax_probe.py with the wheels of the commit before it (.whl_old) and this
# tree's (probe_ab), then tests-integration/test_reductions.py on the GPU
set -u
source bench/device_env.sh
PROBE_S=${PROBE_S:-75} probe_ab outer bench/outer_softmax_probe.py --reps 50
timeout 60 python3 -m pytest -q -p no:cacheprovider tests-integration/test_reductions.py > $OUT/tests.log 2>&1
grep -E "passed|failed|FAILED|^E " $OUT/tests.log | tail -6
