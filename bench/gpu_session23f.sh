#!/usr/bin/env bash
# session 23: inlining a tiny Pointwise whose full-size loads hold as many bytes as its own dtype
# when a reader reads it out of its order (lowering-ir inline.py): bench/outer_softmax_probe.py
# and the training steps whose kernels it changes (gpt2, llama_style, vit_b16), with the wheels
# of the commit before (.whl_old) and this tree's
set -u
source bench/device_env.sh
PROBE_S=${PROBE_S:-80} probe_ab outer bench/outer_softmax_probe.py --reps 50
ROUNDS=${ROUNDS:-2} train_ab ${CASES:-gpt2_train_amp llama_style_train_amp vit_b16_train_amp}
