#!/usr/bin/env bash
# session 26: (1) session 25's pending cold A/B (gpu_session25i.sh): a model's cold first call with
# a4c49b6's wheels (.whl_old) and this tree's, GPT-2 and ViT-B/16 inference; (2) `coil bench` of
# the GPT-2 and Llama-style inference cases at this tree (gpu_session12d.sh)
set -u
source bench/device_env.sh
ROUNDS=0 WARM_S=120 warm_ab gpt2_infer_bf16 vit_b16_infer_bf16
CASES="${CASES:-gpt2_infer_bf16 llama_style_infer_bf16}" PER_CASE_S=${PER_CASE_S:-170} bash bench/gpu_session12d.sh
