#!/usr/bin/env bash
# session 23: where each model's coil step goes (bench/profile_model.py --only coil): wall time
# against GPU busy time (host overhead), kernels per step and the top kernels, per case in CASES
set -u
source bench/device_env.sh
for case in ${CASES:-gpt2_train_amp bert_base_train_amp llama_style_train_amp vit_b16_train_amp gpt2_infer_bf16 bert_base_infer_bf16 llama_style_infer_bf16 vit_b16_infer_bf16}; do
  timeout ${TIME_S:-90} python3 bench/profile_model.py $OUT/prof-$case $case --only coil --top ${TOP:-10} 2>&1 \
    | grep -v -i warn | grep "===\|ms \|first call" | cut -c1-140
done
