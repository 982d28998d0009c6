#!/usr/bin/env bash
# session 24: coil's warm first call of the HF inference cases spends ~0.6 s more outside the
# backend ("Dynamo capture") than Inductor's in 24d. Is it the prehash thread (COIL_PREHASH)
# competing with Dynamo for the GIL? One cold run per case, then ROUNDS alternating warm runs with
# COIL_PREHASH=0 and 1 (bench/compile_profile.py --case), then one warm run's whole profile
# (--cprofile-dump, main thread) for reading on the CPU
set -u
source bench/device_env.sh
for case in ${CASES:-llama_style_infer_bf16 bert_base_infer_bf16}; do
  d=/tmp/cp-$case; rm -rf $d
  export COIL_CACHE_DIR=$d/coil TRITON_CACHE_DIR=$d/triton TORCHINDUCTOR_CACHE_DIR=$d/inductor
  timeout 100 python3 bench/compile_profile.py --case $case > /dev/null 2>&1
  for round in $(seq ${ROUNDS:-3}); do
    for p in 0 1; do
      echo "== $case COIL_PREHASH=$p round $round"
      COIL_PREHASH=$p timeout 100 python3 bench/compile_profile.py --case $case 2>&1 \
        | grep "first call\|Dynamo capture\|AOTAutograd\|coil stages" | cut -c1-140
    done
  done
  timeout 100 python3 bench/compile_profile.py --case $case --cprofile 5 --cprofile-dump $OUT/warm-$case.pstats 2>&1 \
    | grep "first call" | cut -c1-140
done
