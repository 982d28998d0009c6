#!/usr/bin/env bash
# session 9: where the cold compile of the bench's training steps goes on the GPU, after
# 07b8c5b (no horizontal fusion through an RNG seed): bench/compile_profile.py per case, coil
# cold then warm (a new process on the folders the cold run filled), Inductor cold, each with
# its own empty cache folders (RUNS picks some of the three); CPROFILE=case adds a cold coil run under cProfile for that case
set -u
source bench/device_env.sh
for case in ${CASES:-gpt2_train_amp resnet50_train_amp}; do
  C=/tmp/cp_$case; rm -rf $C
  for run in ${RUNS:-coil:cold coil:warm inductor:cold}; do
    compiler=${run%%:*}; D=$C/$compiler; [ "${run#*:}" = cold ] && rm -rf $D; mkdir -p $D
    echo "== $case $run"
    COIL_CACHE_DIR=$D/coil TRITON_CACHE_DIR=$D/triton TORCHINDUCTOR_CACHE_DIR=$D/inductor \
      timeout ${PER_RUN_S:-120} python3 bench/compile_profile.py --case $case --compiler $compiler \
      --json $OUT/${case}_${compiler}_${run#*:}.json 2>&1 | grep -v -i warn | tail -22 | cut -c1-250
  done
done
for case in ${CPROFILE:-}; do
  D=/tmp/cprof_$case; rm -rf $D; mkdir -p $D
  echo "== $case coil cold under cProfile"
  COIL_CACHE_DIR=$D/coil TRITON_CACHE_DIR=$D/triton TORCHINDUCTOR_CACHE_DIR=$D/inductor \
    timeout ${PER_RUN_S:-120} python3 bench/compile_profile.py --case $case --cprofile 35 2>&1 | grep -v -i warn | tail -80 | cut -c1-200
done
