#!/usr/bin/env bash
# session 29: static sizes in kernel bodies and masks chosen at compile time (triton-codegen
# `index_mask`), pointwise stores without the zero broadcast: the micro suite against Inductor
# (`coil bench micro --rounds 5`), the row-norm texts' variants (bench/rownorm_variants_probe.py;
# `_baked` is now the text itself), and the GPU tests session 13's version of the change failed
# (test_channels_last.py) with the runtime's GPU tests
set -u
source bench/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
MICRO_BENCH_S=${MICRO_BENCH_S:-400} micro_rounds $OUT/micro
timeout ${ROW_S:-200} python3 bench/rownorm_variants_probe.py layernorm_fp32 rmsnorm_fp32 --rounds 5 > $OUT/rownorm.log 2>&1
grep -v -i "warn" $OUT/rownorm.log | grep "^==\|^  " | cut -c1-120
timeout 240 python3 -m pytest -q -p no:cacheprovider tests-integration/test_channels_last.py 2>&1 | tail -3
timeout 120 python3 -m pytest -q -p no:cacheprovider packages/runtime/tests -m gpu 2>&1 | tail -2
