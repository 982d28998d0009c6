#!/usr/bin/env bash
# session 18: round(decimals) of half types on CUDA after following eager's CUDA kernel (its first
# product rounded to the half type), the IEEE end-to-end file once more; then `coil bench micro`
# (all 16 cases beside Inductor: the float negation now written as x * -1.0), summary printed
set -u
source bench/device_env.sh
timeout ${FOCUS_S:-200} python3 -m pytest -q -p no:cacheprovider -rfEX --tb=short \
  tests-integration/test_native_coverage_ieee.py > $OUT/focus.log 2>&1
grep -E "^(FAILED|ERROR|XPASS|E  )|passed|failed" $OUT/focus.log | tail -20
mkdir -p /tmp/b18c
micro_bench /tmp/b18c/micro
cp /tmp/b18c/micro/bench.json $OUT/micro_bench.json
