#!/usr/bin/env bash
# session 16: GPT-2 AMP training's ordinary-pool segments with and without the parameters'
# casts recomputed in the backward (bench/ordinary_segments.py)
set -u
source bench/device_env.sh
for r in ${MODES:-1 0}; do
  rm -rf /tmp/coil-cache
  echo "== recompute=$r"
  COIL_RECOMPUTE_PARAM_CASTS=$r timeout ${PER_RUN_S:-150} python3 bench/ordinary_segments.py ${CASE:-gpt2_train_amp} coil 2>&1 \
    | grep -E "^(peak|segment|ordinary)" | head -${ROWS:-40}
done
