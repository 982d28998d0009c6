#!/usr/bin/env bash
# session 20: the training steps whose kernels the epilogue-first fusion and the per-row
# prefetch change beyond cross-entropy (layer norm's and batch norm's backward: their per-row
# epilogue now runs in the row kernel; codegen_oracle dump shows it on the CPU cases): coil's
# step time with this tree's wheels (.whl) and session 19's (.whl_old), alternating, own cache
# folders per wheel set (bench/train_step_time.py), ROUNDS rounds (default 1).
set -u
source bench/device_env.sh
ROUNDS=${ROUNDS:-1} train_ab ${TIME_CASES:-bert_base_train_amp vit_b16_train_amp resnet50_train_amp}
