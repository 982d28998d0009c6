#!/usr/bin/env bash
# session 30: (1) the micro suite, 5 interleaved rounds (`micro_rounds`), this tree's wheels;
# (2) ResNet-50's AMP training step (bench/train_step_time.py: step ms and warm peak) with three
# wheel sets, alternating, ROUNDS rounds, one cache folder per set: .whl_old (before this
# session's inlining and outer online variance), .whl_mid (the narrowing cast read only by split
# partial reductions inlined), .whl (and batch-norm statistics' outer tiling online)
set -u
source bench/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
micro_rounds $OUT/micro
old_wheels || echo "no .whl_old"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site_mid .whl_mid/*.whl
python3 -m compileall -q -j 16 /tmp/site_mid /tmp/site_old > /dev/null 2>&1
for round in $(seq ${ROUNDS:-2}); do
  for site in /tmp/site_old /tmp/site_mid /tmp/site; do
    PYTHONPATH=$site COIL_CACHE_DIR=/tmp/cc-rn-$(basename $site) timeout ${TIME_S:-150} \
      python3 bench/train_step_time.py ${CASE:-resnet50_train_amp} $(basename $site) 2>&1 | tail -1
  done
done
