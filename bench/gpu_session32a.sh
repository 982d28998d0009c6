#!/usr/bin/env bash
# for session 32: session 31's GPT-2 training step measured 21 % slower with the outer-tiling
# changes (8.304 -> 10.021 ms, one round, bench/gpu_session31c.sh) while ResNet-50's got 18 %
# faster. Rerun the A/B on the training steps the changes touch, alternating wheel sets, ROUNDS
# rounds (default 2), with COIL_LOGS=autotune in a log per run ($OUT/CASE-SET-ROUND.log), so a
# tuning choice that moved can be seen. WHEELS names the wheel folders (default ".whl_old .whl");
# each is installed into /tmp/site<folder> and has its own cache folder per case. Session 32 ran
#   WHEELS=".whl_old .whl_b .whl_c .whl" CASES=gpt2_train_amp bash bench/gpu_session32a.sh
# with .whl_old built at f7bde49 (before the changes), .whl_b at 9c87af0 (short strided rows
# "outer"), .whl_c at 562957d (and OUTER_RBLOCK 8) and .whl at 413ff0f (and 497de0e's outer split
# count), each by `git worktree add /tmp/wt REV && (cd /tmp/wt && uv build --all-packages -o DIR)`;
# then WHEELS=".whl_old .whl" CASES=resnet50_train_amp TIME_S=100 twice: f7bde49 against 413ff0f,
# and 413ff0f against 00fa9df (var_mean's outer split count; docs/perf.md, session 32).
set -u
source bench/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
for w in ${WHEELS:-.whl_old .whl}; do
  [ "$w" = .whl ] && continue
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site$w $w/*.whl || exit 1
  [ -n "${NO_PYC:-}" ] || python3 -m compileall -q -j 16 /tmp/site$w > /dev/null 2>&1
done
for case in ${CASES:-gpt2_train_amp bert_base_train_amp}; do
  for round in $(seq ${ROUNDS:-2}); do
    for w in ${WHEELS:-.whl_old .whl}; do
      site=/tmp/site$w; [ "$w" = .whl ] && site=/tmp/site
      PYTHONPATH=$site COIL_CACHE_DIR=/tmp/cc-$case$w COIL_LOGS=autotune timeout ${TIME_S:-110} \
        python3 bench/train_step_time.py $case $w > $OUT/$case$w-$round.log 2>&1
      tail -1 $OUT/$case$w-$round.log
    done
  done
done
