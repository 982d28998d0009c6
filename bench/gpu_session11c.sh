#!/usr/bin/env bash
# session 11: the warm child of `coil bench` (python -m coil.backend.bench_models CASE coil) under
# cProfile, next to bench/compile_profile.py's warm run, on the caches of one cold compile_profile
# run; plus the micro probe (MICRO=cases)
set -u
source bench/device_env.sh
micro_probe
for case in ${CASES:-bert_base_train_amp}; do
  D=/tmp/w_$case; rm -rf $D; mkdir -p $D
  export COIL_CACHE_DIR=$D/coil TRITON_CACHE_DIR=$D/triton TORCHINDUCTOR_CACHE_DIR=$D/inductor
  python3 bench/compile_profile.py --case $case 2>&1 | grep "first call"
  for k in 1 2; do
    echo "== warm compile_profile $k"; python3 bench/compile_profile.py --case $case 2>&1 | grep "first call\|Dynamo\|AOTAutograd\|runtime compile"
    echo "== warm bench child $k"; python3 -m coil.backend.bench_models $case coil 2>&1 | grep first_call
  done
  python3 -m cProfile -o $OUT/${case}_child.prof -m coil.backend.bench_models $case coil 2>&1 | grep first_call
  python3 bench/compile_profile.py --case $case --cprofile-dump $OUT/${case}_profile.prof 2>&1 | grep "first call"
done
