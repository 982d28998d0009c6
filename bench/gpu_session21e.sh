#!/usr/bin/env bash
# session 21: online softmax (triton-codegen online.py: a looped kernel's sum of exp(x - max)
# accumulated in the max's loop; bench/experiments/session21_online_softmax.patch applied to this
# tree): bench/looped_max_probe.py with the wheels of 73fba51 (the patch's base)
# (.whl_old) and this tree's, alternating, one round; then Llama-style training's step time,
# both wheel sets (train_ab, one round: its loss takes the looped kernels, vocabulary 32000).
set -u
source bench/device_env.sh
probe_ab looped bench/looped_max_probe.py --reps 200
ROUNDS=1 TIME_S=${TIME_S:-70} train_ab ${TIME_CASES:-llama_style_train_amp} 2>&1 | tee $OUT/train.txt
