#!/usr/bin/env bash
# session 30: (1) session 29's online-variance GPU test (bench/gpu_session29f.sh's tests);
# (2) the fp32 layer norm's loop texts with the online variance's division replaced by one
# reciprocal per iteration (`_rcp`, bench/rownorm_variants_probe.py); (3) the pointwise chains'
# kernel with streaming loads / stores (bench/kernel_variants_probe.py); logs under $OUT
set -u
NO_PYC=1 source bench/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
timeout ${SUITE_S:-90} python3 -m pytest -q -p no:cacheprovider tests-integration/test_reductions.py -k "online or forced" 2>&1 \
  | grep -v -i "warning:\|warn(" | tail -4
timeout ${ROW_S:-150} python3 bench/rownorm_variants_probe.py layernorm_fp32 --rounds 5 > $OUT/rownorm.log 2>&1
grep -v -i "warn" $OUT/rownorm.log | grep "^==\|^  " | cut -c1-110 | head -40
timeout ${PW_S:-200} python3 bench/kernel_variants_probe.py pointwise_chain_bf16 pointwise_chain_fp32 --rounds 5 > $OUT/pointwise.log 2>&1
grep -v -i "warn" $OUT/pointwise.log | grep "^==\|^  " | cut -c1-110 | head -50
