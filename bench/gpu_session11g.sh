#!/usr/bin/env bash
# session 11: GPT-2's warm first call (bench_models CASE coil) under cProfile after a cold one in
# a new process, on fresh cache folders; then the micro probe (MICRO=cases)
set -u
source bench/device_env.sh
case=${CASE:-gpt2_train_amp}  # CASE=none: the micro probe only
if [ "$case" != none ]; then
  D=/tmp/g_$case; rm -rf $D; mkdir -p $D
  export COIL_CACHE_DIR=$D/coil TRITON_CACHE_DIR=$D/triton TORCHINDUCTOR_CACHE_DIR=$D/inductor
  echo -n "cold: "; python3 -m coil.backend.bench_models $case coil 2>&1 | grep first_call_s
  echo -n "warm: "; python3 -m coil.backend.bench_models $case coil 2>&1 | grep "first_call_s\|graph_caches" | tr '\n' ' ' | cut -c1-700; echo
  echo -n "warm, cProfile: "; python3 -m cProfile -o $OUT/${case}_warm_child.prof -m coil.backend.bench_models $case coil 2>&1 | grep first_call_s
fi
micro_probe
