#!/usr/bin/env bash
# session 17: where GPT-2 AMP training's warm start goes (bench/gpu_session11a.sh for coil cold,
# warm, warm under cProfile, and Inductor cold, warm, warm under cProfile: profiles in $OUT), then
# `coil bench` of the training cases in CASES_BENCH (bench/gpu_session12d.sh), all at this tree's
# wheels
set -u
MICRO= CASES=${CASES_PROFILE:-gpt2_train_amp} PER_RUN_S=${PER_RUN_S:-150} bash bench/gpu_session11a.sh
CASES=${CASES_BENCH:-gpt2_train_amp} PER_CASE_S=${PER_CASE_S:-330} bash bench/gpu_session12d.sh
