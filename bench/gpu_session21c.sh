#!/usr/bin/env bash
# session 21: (1) coil's training step time of GPT-2 and Llama-style with fa32b0c's wheels
# (.whl_old) and this tree's (e5da2b1's single NaN-propagating max reduction: the attention
# softmax and the loss), one round (train_ab); (2) `coil bench` of CASES with this tree's wheels
# (bench/gpu_session12d.sh), written progressively to $OUT.
set -u
source bench/device_env.sh
ROUNDS=${TRAIN_ROUNDS:-1} train_ab ${TIME_CASES:-gpt2_train_amp llama_style_train_amp} 2>&1 | tee $OUT/train.txt
mkdir -p $OUT/bench
OUT=$OUT/bench CASES=${CASES:-llama_style_train_amp vit_b16_infer_bf16} PER_CASE_S=${PER_CASE_S:-200} \
  bash bench/gpu_session12d.sh 2>&1 | tee $OUT/bench.txt
