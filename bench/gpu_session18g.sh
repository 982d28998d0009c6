#!/usr/bin/env bash
# session 18: coil's training step time of each case in TIME_CASES with this tree's wheels (.whl)
# and session 17's last (.whl_old), alternating, ROUNDS rounds, own cache folders per wheel set
# (bench/train_step_time.py): does anything of this session (float negation as x * -1.0, the
# signbit and div_rn ops, the integer pow, the conj-view record_stream) move a model's step?
set -u
source bench/device_env.sh
ROUNDS=${ROUNDS:-3} train_ab ${TIME_CASES:-gpt2_train_amp llama_style_train_amp}
