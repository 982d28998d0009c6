#!/usr/bin/env bash
# session 25: variants of coil's big pointwise kernels (no mask, 4 warps, no broadcast term) timed
# in interleaved rounds beside Inductor (bench/kernel_variants_probe.py, then named
# pointwise_variants_probe.py, with its four pointwise cases), then the layer norm's
# configurations, Inductor's kept one beside coil's tuned one (bench/micro_probe.py)
set -u
source bench/device_env.sh
timeout ${PROBE_S:-300} python3 bench/kernel_variants_probe.py pointwise_chain_bf16 pointwise_chain_fp32 bias_gelu_bf16 bias_gelu_fp32 --rounds ${ROUNDS:-5} 2>&1 | grep -v -i warn | tee $OUT/pointwise_variants.txt
MICRO="${MICRO:-layernorm_bf16}" micro_probe
