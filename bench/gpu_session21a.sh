#!/usr/bin/env bash
# session 21: (1) coil's max/min reductions with NaNs on CUDA (bench/nan_reduce_check.py: a
# float max/min now reduces once, through a NaN-propagating combine); (2) cross-entropy's row
# kernel, hand-written variants (bench/ce_row_variants.py); (3) where Llama-style training's warm
# start goes, coil and Inductor (bench/gpu_session11a.sh: cold, warm, warm under cProfile), and
# coil's warm start again with COIL_PREHASH=0 and =1; (4) micro_probe of the cross-entropy and
# fp32 softmax cases with fa32b0c's wheels (.whl_old) and this tree's, one round.
set -u
source bench/device_env.sh
timeout 120 python3 bench/nan_reduce_check.py 2>&1 | grep -v -i warn | tee $OUT/nan.txt
timeout 200 python3 bench/ce_row_variants.py 2>&1 | grep -v -i warn > $OUT/ce.txt; cat $OUT/ce.txt
MICRO= CASES=llama_style_train_amp RUNS="coil:cold coil:warm coil:warmprof inductor:cold inductor:warm inductor:warmprof" \
  PER_RUN_S=100 bash bench/gpu_session11a.sh 2>&1 | tee $OUT/warm.txt
D=/tmp/cp_llama_style_train_amp/coil
for p in 0 1 0 1; do
  echo "== coil warm COIL_PREHASH=$p"
  COIL_PREHASH=$p COIL_CACHE_DIR=$D/coil TRITON_CACHE_DIR=$D/triton TORCHINDUCTOR_CACHE_DIR=$D/inductor \
    timeout 60 python3 bench/compile_profile.py --case llama_style_train_amp 2>&1 | grep "first call\|AOTAutograd"
done 2>&1 | tee $OUT/prehash.txt
ROUNDS=1 MICRO_S=90 micro_ab 21a cross_entropy_bf16 cross_entropy_fp32 softmax_fp32 2>&1 | tee $OUT/micro.txt
