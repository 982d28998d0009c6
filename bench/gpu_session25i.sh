#!/usr/bin/env bash
# session 25: what the pointwise candidates and the read-again alternative cost a model's cold
# compile: bench/compile_profile.py --case CASE with the wheels of a4c49b6 (.whl_old) and this
# tree's, each cold into its own fresh cache folders, alternating (first call and autotune stage).
# Not run in session 25 (no device time was left); the first thing to run next, e.g.
# CASES="gpt2_infer_bf16 vit_b16_infer_bf16" ROUNDS=2, with .whl_old built from a4c49b6
set -u
source bench/device_env.sh
old_wheels || echo "no .whl_old"
for case in ${CASES:-gpt2_infer_bf16}; do
  for round in $(seq ${ROUNDS:-1}); do
    for site in /tmp/site_old /tmp/site; do
      d=/tmp/cold-$case-$(basename $site)-$round; rm -rf $d
      echo "== $case $(basename $site) cold $round"
      PYTHONPATH=$site COIL_CACHE_DIR=$d/coil TRITON_CACHE_DIR=$d/triton TORCHINDUCTOR_CACHE_DIR=$d/inductor \
        timeout ${COLD_S:-60} python3 bench/compile_profile.py --case $case 2>&1 \
        | grep "first call\|autotune\|runtime compile\|coil stages" | cut -c1-120
    done
  done
done
