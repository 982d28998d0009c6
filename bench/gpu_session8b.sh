#!/usr/bin/env bash
# session 8: CUDA-graph GPU tests (one process per file), train_graph_memory.py (CASES x
# CONFIGS), then `coil bench BENCH` (eager, Inductor, coil in one process) when BENCH is set
set -u
source bench/device_env.sh
for t in ${TESTS:-}; do
  echo "== $t"
  COIL_AUTOTUNE=0 timeout ${TEST_S:-150} python3 -m pytest -q -p no:cacheprovider --show-capture=no --tb=short $t > $OUT/t.log 2>&1
  grep -v "^DEBUG" $OUT/t.log | grep -E "^E  |passed|failed|rror" | tail -12 | cut -c1-600
done
for case in ${CASES:-}; do
  COIL_AUTOTUNE=0 timeout ${PER_CASE_S:-150} python3 bench/train_graph_memory.py $case ${CONFIGS:-coil_on} | tee -a $OUT/train_graph_memory.jsonl | cut -c1-330
done
if [ -n "${BENCH:-}" ]; then
  timeout ${BENCH_S:-480} python3 -m coil.backend.cli bench ${BENCH} --out $OUT/bench --budget-s 2000 2>&1 | grep "done in" | cut -c1-200
  grep -v "^$" $OUT/bench/bench.md 2>/dev/null | head -30
fi
