#!/usr/bin/env bash
# session 28: on the H200, the micro cases coil trails Inductor on or runs below 85 % of copy
# bandwidth (bench/gpu_session28d.sh): coil's kernel and its variants beside Inductor's
# (bench/kernel_variants_probe.py, 5 interleaved rounds)
set -u
source bench/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
timeout ${PROBE_S:-400} python3 bench/kernel_variants_probe.py ${CASES:-layernorm_fp32 rmsnorm_fp32 pointwise_chain_bf16 bias_gelu_bf16} --rounds 5 2>&1 \
  | grep -v -i "warn" | cut -c1-160
