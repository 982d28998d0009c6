#!/usr/bin/env bash
# session 17: a loop one block long among the autotuning candidates and a 0.5 % switch margin
# (this tree, .whl) against the code before them (.whl_old): `coil bench micro` with .whl (all
# 16 micro cases beside Inductor), micro_probe of rmsnorm_bf16 (what coil's tuner chose), then
# coil's step time of TIME_CASE with each wheel set, alternating, two rounds
# (bench/train_step_time.py, own cache folders per wheel set)
set -u
source bench/device_env.sh
old_wheels || echo "no .whl_old"
REAL_OUT=$OUT
mkdir -p /tmp/b17g
micro_bench /tmp/b17g/micro
MICRO=${MICRO:-rmsnorm_bf16} micro_probe
for round in 1 2; do
  for site in /tmp/site_old /tmp/site; do
    PYTHONPATH=$site COIL_CACHE_DIR=/tmp/coil-cache-$(basename $site) timeout ${TIME_S:-120} \
      python3 bench/train_step_time.py ${TIME_CASE:-llama_style_train_amp} $(basename $site) 2>&1 | tail -1
  done
done
tar czf $REAL_OUT/b17g.tgz -C /tmp b17g
