#!/usr/bin/env bash
# session 22: the online softmax patch (bench/experiments/session21_online_softmax.patch applied to
# this tree, wheels in .whl; wheels of 8f7fc45 in .whl_old) on the GPU: first its special rows
# (bench/online_softmax_check.py: NaN, inf, rows of -inf, looped), then bench/looped_max_probe.py
# with both wheel sets (probe_ab), then Llama-style training's step time (train_ab, one round).
set -u
source bench/device_env.sh
timeout 200 python3 bench/online_softmax_check.py 2>&1 | grep -v -i warn | tee $OUT/check.txt
PROBE_S=110 probe_ab looped bench/looped_max_probe.py --reps 200
ROUNDS=1 TIME_S=${TIME_S:-70} train_ab ${TIME_CASES:-llama_style_train_amp} 2>&1 | tee $OUT/train.txt
