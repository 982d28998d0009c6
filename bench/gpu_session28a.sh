#!/usr/bin/env bash
# session 28: `coil bench` on the HF inference cases with coil's frontend cache
# (coil.backend.frontend_cache): per case, cold, three warm processes and the in-process compile
# (which the frontend cache now serves); bench/gpu_session12d.sh prints the rows, the warm/cold
# line, each warm graph's cache verdict and Dynamo's share
set -u
CASES="${CASES:-gpt2_infer_bf16 llama_style_infer_bf16}" PER_CASE_S=${PER_CASE_S:-290} bash bench/gpu_session12d.sh
