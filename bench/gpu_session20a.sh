#!/usr/bin/env bash
# session 20: cross-entropy's per-row loss in the row kernel, its loads issued early. The
# epilogue-first fusion order of session 19 (1ace338, reverted: its row kernel waited for the
# target's index and the gathered logit after the row's reductions) again, now with
# KernelWriter.prefetch: a reduction kernel issues its per-row members' loads (and computes
# those members that read only inputs) right after its first reduction's row loads.
# bench/micro_probe.py on both cross-entropy cases with this tree's wheels (.whl) and session
# 19's (.whl_old), alternating, two rounds; GPT-2 and Llama-style training steps, both wheel
# sets alternating (bench/train_step_time.py).
set -u
source bench/device_env.sh
micro_ab 20a cross_entropy_bf16 cross_entropy_fp32
train_ab ${TIME_CASES:-gpt2_train_amp llama_style_train_amp}
