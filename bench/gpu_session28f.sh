#!/usr/bin/env bash
# session 28: on the H200, what coil's autotuner timed and kept for the micro cases it trails
# Inductor on (bench/micro_probe.py: COIL_LOGS=autotune, Inductor's kept configurations); the
# log is $OUT/micro.log, each case's kernels under $OUT/micro/
set -u
source bench/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
MICRO="${MICRO:-pointwise_chain_bf16 layernorm_fp32 rmsnorm_fp32 bias_gelu_fp32}" MICRO_S=${MICRO_S:-300} micro_probe
grep -i "autotune\|candidate\|kept\|chose" $OUT/micro.log | cut -c1-220 | head -60
