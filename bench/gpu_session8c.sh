#!/usr/bin/env bash
# session 8: two training cases in one process (does the second one replay?), then `coil bench BENCH`
set -u
source bench/device_env.sh
if [ -n "${SEQ:-}" ]; then
  COIL_AUTOTUNE=0 timeout ${SEQ_S:-200} python3 bench/train_graph_memory.py --one $SEQ coil_on > $OUT/seq.log 2>&1
  grep -E "RESULT|CudaGraphRunner|Error" $OUT/seq.log | cut -c1-700
fi
timeout ${BENCH_S:-480} python3 -m coil.backend.cli bench ${BENCH} --out $OUT/bench --budget-s 2000 2>&1 | grep "done in" | cut -c1-200
grep -v "^$" $OUT/bench/bench.md 2>/dev/null | head -30
