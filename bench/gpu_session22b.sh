#!/usr/bin/env bash
# session 22: configurations and variants of the looped online softmax kernel
# (bench/looped_softmax_variants.py), and which configuration coil's autotuner picks for the
# looped softmax / cross-entropy of bench/looped_max_probe.py (COIL_LOGS=autotune).
set -u
source bench/device_env.sh
timeout 300 python3 bench/looped_softmax_variants.py --reps 60 2>&1 | grep -v -i warn | tee $OUT/variants.txt
COIL_LOGS=autotune timeout 200 python3 bench/looped_max_probe.py --reps 100 > $OUT/autotune.log 2>&1
grep -v -i warn $OUT/autotune.log | grep -i "autotun\|coil /\|XBLOCK\|RBLOCK" | cut -c1-250 | head -60
