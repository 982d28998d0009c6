#!/usr/bin/env bash
# session 29: with static sizes in kernel bodies and the 1024 / 4 pointwise candidate for kernels
# with plain loads: the micro suite against Inductor (`coil bench micro --rounds 5`), then a model
# case (default ResNet-50 inference, whose kernels that differed only in size are now distinct
# texts: its cold compile, warm starts and speed; bench/gpu_session12d.sh)
set -u
source bench/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
MICRO_BENCH_S=${MICRO_BENCH_S:-300} micro_rounds $OUT/micro
CASES="${CASES:-resnet50_infer_bf16}" PER_CASE_S=${PER_CASE_S:-265} bash bench/gpu_session12d.sh
