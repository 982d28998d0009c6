#!/usr/bin/env bash
# session 12: A/B of coil's training step time on one machine (bench/train_step_time.py):
# wheels of .whl_old (9a6f057: before eviction hints and the expandable graph pool) vs .whl,
# and .whl with COIL_GRAPH_POOL_EXPANDABLE=0; each twice, interleaved, own cache folders
set -u
source bench/device_env.sh
old_wheels || exit 1
for c in ${CASES:-resnet50_train_amp}; do
  for round in 1 2; do
    for v in old new new_noexp; do
      site=/tmp/site; [ $v = old ] && site=/tmp/site_old
      exp=1; [ $v = new_noexp ] && exp=0
      echo -n "$c $v round $round: "
      COIL_CACHE_DIR=/tmp/ab_$v/coil TRITON_CACHE_DIR=/tmp/ab_$v/triton PYTHONPATH=$site COIL_GRAPH_POOL_EXPANDABLE=$exp \
        timeout 200 python3 bench/train_step_time.py $c $v 2>&1 | grep -v -i warn | tail -1
    done
  done
done
