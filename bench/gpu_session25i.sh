#!/usr/bin/env bash
# session 25: what the pointwise candidates and the read-again alternative cost a model's cold
# compile: bench/compile_profile.py --case CASE with the wheels of a4c49b6 (.whl_old) and this
# tree's, each cold into its own fresh cache folders (warm_ab with no warm rounds: first call,
# autotune and coil-stage lines). Not run in session 25 (no device time was left); the first
# thing to run next, e.g. CASES="gpt2_infer_bf16 vit_b16_infer_bf16", with .whl_old built from
# a4c49b6
set -u
source bench/device_env.sh
ROUNDS=${ROUNDS:-0} warm_ab ${CASES:-gpt2_infer_bf16}
