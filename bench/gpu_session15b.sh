#!/usr/bin/env bash
# session 15: GPT-2 AMP training's compiled graphs as coil writes them (COIL_DEBUG_DIR), for
# reading the wrapper lines where the CUDA-graph pool grows (bench/gpu_session15a.sh's probe)
set -u
source bench/device_env.sh
rm -rf /tmp/coil-cache /tmp/dbg
COIL_DEBUG_DIR=/tmp/dbg timeout ${PER_RUN_S:-150} python3 -m coil.backend.bench_models gpt2_train_amp coil > $OUT/peak.log 2>&1
grep -E '^(first_call_s|warm_peak)=' $OUT/peak.log | cut -c1-200
for g in /tmp/dbg/*; do
  n=$(basename $g); mkdir -p $OUT/dbg/$n
  cp $g/*.txt $g/07_wrapper.py $OUT/dbg/$n/ 2>/dev/null
done
ls $OUT/dbg
