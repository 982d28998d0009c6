#!/usr/bin/env bash
# session 18: the OpInfo sweep on the GPU (COIL_OPINFO_DEVICE=cuda), DTYPES (default float32 and
# bfloat16), one sample per (op, dtype), JOBS worker processes, the compile workers off in each;
# results (sweep.jsonl, summary.md/json) in $OUT/sweep, written as it goes (a cut run keeps them).
# Needs expecttest (torch's op_db imports it): put its wheel in .whl beside coil's.
set -u
source bench/device_env.sh
cd tests-integration
COIL_OPINFO_DEVICE=cuda COIL_COMPILE_WORKERS=0 timeout ${SWEEP_S:-500} python3 opinfo/sweep.py \
  --dtypes ${DTYPES:-float32,bfloat16} --max-samples ${SAMPLES:-1} --jobs ${JOBS:-16} --timeout 90 \
  --out $OUT/sweep > $OUT/sweep.log 2>&1
echo "sweep exit $?"
cd ..
[ -f $OUT/sweep/sweep.jsonl ] && wc -l $OUT/sweep/sweep.jsonl
[ -f $OUT/sweep/summary.md ] && head -12 $OUT/sweep/summary.md
tail -5 $OUT/sweep.log
