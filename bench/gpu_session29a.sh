#!/usr/bin/env bash
# session 29: on the H200, coil's row-norm texts (persistent, reread, looped) from its own code
# generator and their variants (masks, baked sizes, warps, the store's broadcast) beside
# Inductor's kernel (bench/rownorm_variants_probe.py), then the fp32 pointwise cases' variants
# (bench/kernel_variants_probe.py); 5 interleaved rounds each
set -u
source bench/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
timeout ${ROW_S:-330} python3 bench/rownorm_variants_probe.py ${ROWS_CASES:-layernorm_fp32 rmsnorm_fp32} --rounds 5 --show \
  > $OUT/rownorm.log 2>&1
grep -v -i "warn" $OUT/rownorm.log | grep "^==\|^  " | cut -c1-160
timeout ${PW_S:-200} python3 bench/kernel_variants_probe.py ${PW_CASES:-pointwise_chain_fp32 bias_gelu_fp32} --rounds 5 2>&1 \
  | grep -v -i "warn" | cut -c1-160
