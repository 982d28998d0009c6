#!/usr/bin/env bash
# session 25: the pointwise cases coil still trails after 25e, coil's kernel under other block
# sizes and warps (512 / 8: Inductor's for the pointwise chain) beside the variants of 25b-25d
# (bench/kernel_variants_probe.py)
set -u
source bench/device_env.sh
timeout ${PROBE_S:-300} python3 bench/kernel_variants_probe.py ${CASES:-pointwise_chain_fp32 pointwise_chain_bf16 bias_gelu_fp32 bias_gelu_bf16} --rounds ${ROUNDS:-5} 2>&1 | grep -v -i warn | grep -v profiler | tee $OUT/kernel_variants.txt
