#!/usr/bin/env bash
# for session 32: session 31's GPT-2 training step measured 21 % slower with the outer-tiling
# changes (8.304 -> 10.021 ms, one round, bench/gpu_session31c.sh) while ResNet-50's got 18 %
# faster. Rerun the A/B of .whl_old (wheels of f7bde49, before the changes) against .whl (this
# tree) on the training steps the changes touch, alternating, ROUNDS rounds (default 2), with
# COIL_LOGS=autotune in a log per run, so a tuning choice that moved can be seen:
#   CASES="gpt2_train_amp bert_base_train_amp" bash bench/gpu_session32a.sh
# If GPT-2's regression reproduces, bisect with .whl_old built at 9c87af0 (short strided rows
# "outer" only), 562957d (and OUTER_RBLOCK 8) or 497de0e (and the outer split count), e.g.
#   git worktree add /tmp/wt 562957d && (cd /tmp/wt && uv build --all-packages -o $PWD/.whl_old)
# Then `CASES="resnet50_train_amp gpt2_train_amp" bash bench/gpu_session30c.sh` for the bench's
# accuracy checks of the training steps with this tree (bench/train_step_time.py checks none).
set -u
source bench/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
old_wheels || echo "no .whl_old"
for case in ${CASES:-gpt2_train_amp bert_base_train_amp}; do
  for round in $(seq ${ROUNDS:-2}); do
    for site in /tmp/site_old /tmp/site; do
      s=$(basename $site)
      PYTHONPATH=$site COIL_CACHE_DIR=/tmp/cc-$case-$s COIL_LOGS=autotune timeout ${TIME_S:-110} \
        python3 bench/train_step_time.py $case $s > $OUT/$case-$s-$round.log 2>&1
      tail -1 $OUT/$case-$s-$round.log
    done
  done
done
