#!/usr/bin/env bash
# session 20: the training steps whose kernels the epilogue-first fusion and the per-row
# prefetch change beyond cross-entropy (layer norm's and batch norm's backward: their per-row
# epilogue now runs in the row kernel; codegen_oracle dump shows it on the CPU cases): coil's
# step time with this tree's wheels (.whl) and session 19's (.whl_old), alternating, own cache
# folders per wheel set (bench/train_step_time.py), ROUNDS rounds (default 1).
set -u
source bench/device_env.sh
old_wheels || echo "no .whl_old"
for case in ${TIME_CASES:-bert_base_train_amp vit_b16_train_amp resnet50_train_amp}; do
  for round in $(seq ${ROUNDS:-1}); do
    for site in /tmp/site_old /tmp/site; do
      PYTHONPATH=$site COIL_CACHE_DIR=/tmp/coil-cache-$case-$(basename $site) timeout ${TIME_S:-150} \
        python3 bench/train_step_time.py $case $(basename $site) 2>&1 | tail -1
    done
  done
done
