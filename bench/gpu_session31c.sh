#!/usr/bin/env bash
# session 31: GPT-2's AMP training step (bench/train_step_time.py) with .whl_old (f7bde49) and .whl
# (the outer-tiling changes), alternating, one round (run after gpu_session31b.sh on the same
# machine)
set -u
source bench/device_env.sh
TIME_S=${TIME_S:-80} ROUNDS=${ROUNDS:-1} train_ab gpt2_train_amp
