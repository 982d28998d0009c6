#!/usr/bin/env bash
# session 22: one-row-per-program loop candidates (triton-codegen config.WIDE_LOOPS) in coil's
# autotuner. .whl_old: 2df128d (online softmax, old candidates); .whl: this tree.
# bench/looped_max_probe.py with both (probe_ab), the new one's autotune choices, then training
# step times of GPT-2 and Llama-style (their losses loop over 50257 and 32000 columns).
set -u
source bench/device_env.sh
PROBE_S=150 probe_ab looped bench/looped_max_probe.py --reps 200
COIL_LOGS=autotune COIL_CACHE_DIR=/tmp/cc-at timeout 200 python3 bench/looped_max_probe.py --reps 50 > $OUT/autotune.log 2>&1
grep "chosen" $OUT/autotune.log | cut -c1-200
ROUNDS=1 TIME_S=${TIME_S:-90} train_ab ${TIME_CASES:-gpt2_train_amp llama_style_train_amp} 2>&1 | tee $OUT/train.txt
