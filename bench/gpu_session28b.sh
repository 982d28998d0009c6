#!/usr/bin/env bash
# session 28: the frontend cache's tests on CUDA (hits replayed as CUDA graphs), then `coil bench`
# on BERT and ResNet-50 inference (bench/gpu_session28a.sh with other CASES)
set -u
source bench/device_env.sh
timeout 150 python3 -m pytest -q -p no:cacheprovider tests-integration/test_frontend_cache.py 2>&1 | tail -3
CASES="${CASES:-bert_base_infer_bf16 resnet50_infer_bf16}" PER_CASE_S=${PER_CASE_S:-215} bash bench/gpu_session28a.sh
