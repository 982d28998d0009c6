#!/usr/bin/env bash
# session 11: (1) the micro cases where coil trails Inductor, side by side (bench/micro_probe.py:
# Inductor's kept configs and sources, coil's debug dir and autotune log); (2) where a warm start
# goes: bench/compile_profile.py per case, coil cold, coil warm, coil warm under cProfile (whole
# profile dumped), Inductor cold, warm, warm under cProfile; each compiler its own cache folders
set -u
source bench/device_env.sh
MICRO=${MICRO-rmsnorm_bf16 rmsnorm_fp32 sum_dim1_bf16 layernorm_fp32} micro_probe
for case in ${CASES:-resnet50_train_amp bert_base_train_amp}; do
  C=/tmp/cp_$case; rm -rf $C
  for run in ${RUNS:-coil:cold coil:warm coil:warmprof inductor:cold inductor:warm inductor:warmprof}; do
    compiler=${run%%:*}; kind=${run#*:}; D=$C/$compiler; [ $kind = cold ] && rm -rf $D; mkdir -p $D
    extra=""; [ $kind = warmprof ] && extra="--cprofile-dump $OUT/${case}_${compiler}_warm.prof"
    echo "== $case $run"
    COIL_CACHE_DIR=$D/coil TRITON_CACHE_DIR=$D/triton TORCHINDUCTOR_CACHE_DIR=$D/inductor \
      timeout ${PER_RUN_S:-120} python3 bench/compile_profile.py --case $case --compiler $compiler $extra \
      --json $OUT/${case}_${compiler}_$kind.json 2>&1 | grep -v -i warn | grep "first call\|Dynamo\|AOTAutograd\|coil\|  [a-z]" | head -24 | cut -c1-250
  done
done
