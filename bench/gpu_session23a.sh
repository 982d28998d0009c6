#!/usr/bin/env bash
# session 23: the visit-order fusion (scheduler/visit_order.py, knob COIL_FUSION_VISIT_ORDER) on
# and off, coil's step time and first call of each case in CASES (bench/train_step_time.py), each
# knob value with its own cache folder, ROUNDS rounds alternating (later rounds start warm);
# Inductor's step time once per case when INDUCTOR=1
set -u
source bench/device_env.sh
for case in ${CASES:-resnet50_train_amp vit_b16_train_amp}; do
  if [ -n "${INDUCTOR:-}" ]; then
    TORCHINDUCTOR_CACHE_DIR=/tmp/ind-$case timeout ${TIME_S:-150} python3 bench/train_step_time.py $case inductor 2>&1 | tail -1
  fi
  for round in $(seq ${ROUNDS:-2}); do
    for vo in 0 1; do
      COIL_FUSION_VISIT_ORDER=$vo COIL_CACHE_DIR=/tmp/cc-$case-vo$vo timeout ${TIME_S:-150} \
        python3 bench/train_step_time.py $case vo$vo 2>&1 | tail -1
    done
  done
done
