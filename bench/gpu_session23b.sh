#!/usr/bin/env bash
# session 23: ResNet-50 training's step time at three commits (a bisection of a slowdown seen in
# 23a): the wheels in each folder of WHEELS (default .whl_808006e = end of session 20,
# .whl_8f7fc45 = end of session 21, .whl = this tree) installed side by side, ROUNDS rounds
# alternating (bench/train_step_time.py), each wheel set with its own cache folder
set -u
source bench/device_env.sh
for w in ${WHEELS:-.whl_808006e .whl_8f7fc45}; do
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site$w $w/*.whl || exit 1
  python3 -m compileall -q -j 16 /tmp/site$w > /dev/null 2>&1
done
for case in ${CASES:-resnet50_train_amp}; do
  for round in $(seq ${ROUNDS:-2}); do
    for w in ${WHEELS:-.whl_808006e .whl_8f7fc45} .whl; do
      site=/tmp/site$w; [ $w = .whl ] && site=/tmp/site
      PYTHONPATH=$site COIL_CACHE_DIR=/tmp/cc-$case$w timeout ${TIME_S:-150} \
        python3 bench/train_step_time.py $case $w 2>&1 | tail -1
    done
  done
done
