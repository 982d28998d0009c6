#!/usr/bin/env bash
# session 21: online softmax (triton-codegen online.py: a looped kernel's sum of exp(x - max)
# accumulated in the max's loop): bench/looped_max_probe.py with the wheels of 410d1d9's tree
# (.whl_old) and this tree's, alternating, one round; then Llama-style training's step time,
# both wheel sets (train_ab, one round: its loss takes the looped kernels, vocabulary 32000).
set -u
source bench/device_env.sh
old_wheels || echo "no .whl_old"
for site in /tmp/site_old /tmp/site; do
  echo "== $(basename $site)"
  PYTHONPATH=$site COIL_CACHE_DIR=/tmp/cc-21e-$(basename $site) timeout ${PROBE_S:-100} \
    python3 bench/looped_max_probe.py --reps 200 2>&1 | grep -v -i warn
done 2>&1 | tee $OUT/looped.txt
ROUNDS=1 TIME_S=${TIME_S:-70} train_ab ${TIME_CASES:-llama_style_train_amp} 2>&1 | tee $OUT/train.txt
