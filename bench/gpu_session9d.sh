#!/usr/bin/env bash
# session 9: `coil bench` over CASES, one invocation (and output folder) per case so that each
# finished case keeps its bench.json/bench.md if a later one runs out of time
set -u
source bench/device_env.sh
for case in ${CASES:-gpt2_train_amp}; do
  timeout ${PER_CASE_S:-300} python3 -m coil.backend.cli bench $case --out $OUT/bench_$case --budget-s 2000 2>&1 | grep "done in" | cut -c1-200
  grep "^| $case" $OUT/bench_$case/bench.md 2>/dev/null | cut -c1-400
done
grep -h "^| case\|^|---" $OUT/bench_*/bench.md 2>/dev/null | head -2
