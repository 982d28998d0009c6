#!/usr/bin/env bash
# session 18, after the split rule's weighting of scattered gathers (an NLL loss's target logits):
# `coil bench micro` (all 16 beside Inductor, as 18c); then coil's training step time of each case
# in TIME_CASES with this tree's wheels (.whl) and session 17's last (.whl_old), alternating, two
# rounds, own cache folders per wheel set (bench/train_step_time.py)
set -u
source bench/device_env.sh
old_wheels || echo "no .whl_old"
mkdir -p /tmp/b18f
micro_bench /tmp/b18f/micro
cp /tmp/b18f/micro/bench.json $OUT/micro_bench.json
for case in ${TIME_CASES:-gpt2_train_amp}; do
  for round in 1 2; do
    for site in /tmp/site_old /tmp/site; do
      PYTHONPATH=$site COIL_CACHE_DIR=/tmp/coil-cache-$(basename $site) timeout ${TIME_S:-150} \
        python3 bench/train_step_time.py $case $(basename $site) 2>&1 | tail -1
    done
  done
done
